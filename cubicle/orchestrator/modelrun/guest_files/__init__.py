"""Files the drill writes into the guest: the form page, its tiny server, and a launcher.

They run inside the guest under its ``python3`` (standard library only) and are never imported on
the host; they live in a package so that they ship with the wheel.
"""
