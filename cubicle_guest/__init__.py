"""cubicle's in-guest agent and the host <-> guest protocol.

Light on purpose: python-xlib, mss and Pillow only (and only the agent's own modules need them;
:mod:`cubicle_guest.protocol`, :mod:`cubicle_guest.client` and :mod:`cubicle_guest.errors` are pure
standard library, so the host imports them without an X server).
"""

__version__ = "0.1.0"
