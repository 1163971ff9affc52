"""Wait until the guest's panel is on screen: ``python desktop_ready.py [TIMEOUT_S]``.

Run by the Docker supervisor and the VM's init between starting the panel (tint2) and starting
the agent, so the first screenshot a model receives shows the desktop it will drive, not a bare
root window. Ready means: the screen's pixel just inside the bottom-left corner has the panel's
background colour (the first ``background_color`` of ``/etc/xdg/tint2/tint2rc``, a colour the
root window's pattern never has), i.e. the panel has been drawn.

Exit status 0 when ready, 1 (with one line on stderr saying what was missing) after
``TIMEOUT_S`` seconds (default 10); the caller logs it and starts the agent anyway.
Uses ``DISPLAY`` and python-xlib (installed in the agent's venv).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from Xlib import X, display

TINT2RC = Path("/etc/xdg/tint2/tint2rc")
POLL_S = 0.02


def panel_colour(config: Path = TINT2RC) -> tuple[int, int, int]:
    """The panel background (the first ``background_color = #rrggbb`` of the tint2 config)."""
    found = re.search(r"^background_color\s*=\s*#([0-9a-fA-F]{6})", config.read_text(), re.M)
    if found is None:
        raise SystemExit(f"desktop_ready: no background_color in {config}")
    value = int(found.group(1), 16)
    return (value >> 16) & 0xFF, (value >> 8) & 0xFF, value & 0xFF


def corner_pixel(dpy: display.Display) -> tuple[int, int, int]:
    screen = dpy.screen()
    image = screen.root.get_image(2, screen.height_in_pixels - 2, 1, 1, X.ZPixmap, 0xFFFFFFFF)
    blue, green, red = image.data[0], image.data[1], image.data[2]  # 24/32-bit TrueColor, BGRx
    return red, green, blue


def main(argv: list[str]) -> int:
    timeout_s = float(argv[1]) if len(argv) > 1 else 10.0
    wanted = panel_colour()
    dpy = display.Display()
    deadline = time.monotonic() + timeout_s
    seen = (0, 0, 0)
    try:
        while time.monotonic() < deadline:
            seen = corner_pixel(dpy)
            if seen == wanted:
                return 0
            time.sleep(POLL_S)
    finally:
        dpy.close()
    print(
        f"desktop_ready: the panel was not drawn within {timeout_s:.0f} s "
        f"(corner pixel {seen}, panel colour {wanted})",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
