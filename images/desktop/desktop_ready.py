"""Wait until a piece of the guest desktop is up: ``python desktop_ready.py wm|panel [TIMEOUT_S]``
(or ``wm panel``: both in turn, each announced on stdout; see :func:`main`).

Run by the desktop supervisor (images/desktop/supervisor.py, both backends: imported in a forked
child of it), which starts the desktop in this order:

- ``wm``: openbox is managing the screen (the root window's ``_NET_SUPPORTING_WM_CHECK`` names a
  live window) and has set the number of desktops (:func:`wm_running`). The panel starts only
  then: a tint2 started before the window manager re-initialises itself when one appears, and one
  started before the desktops are set sleeps a second; each costs about a second.
- ``panel``: the panel is drawn, i.e. the screen's pixel just inside the bottom-left corner has
  the panel's background colour (the first ``background_color`` of :data:`TINT2RC`, a
  colour the root window's pattern never has). The agent starts only then, so the first
  screenshot a model receives shows the desktop it will drive, not a bare root window.

The waits sleep on the X connection and look only when the X server says something changed: a
property of the root window (``wm``), or damage that covers that corner pixel (``panel``, with
the DAMAGE extension; without it, every :data:`FALLBACK_POLL_S`). Polling every 10 ms, as it
once did, took a good share of a TCG guest's one vCPU from openbox and the panel it waited for.

Exit status 0 when ready, 1 (with one line on stderr saying what was missing) after
``TIMEOUT_S`` seconds (default 10), 2 on bad usage; the caller logs it and goes on.
Uses ``DISPLAY`` and python-xlib (installed in the agent's venv).
"""

from __future__ import annotations

import os
import re
import select
import sys
import time
from pathlib import Path

from Xlib import X, display, error
from Xlib.ext import damage

TINT2RC = Path(os.environ.get("CUBICLE_PANEL_CONFIG", "/etc/xdg/tint2/tint2rc"))
"""The panel's configuration (``CUBICLE_PANEL_CONFIG``, as the supervisor's)."""
FALLBACK_POLL_S = 0.25
"""The longest a wait sleeps without an event (a safety net, and the pace without DAMAGE)."""


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


def wm_running(dpy: display.Display) -> bool:
    """The window manager has started: the root window names a live window as its check window,
    and says how many desktops there are.

    The second is what the panel needs: tint2 reads ``_NET_NUMBER_OF_DESKTOPS`` as it starts and,
    while the property is missing, sleeps a whole second before reading it again. openbox names
    its check window as it takes the screen and sets the desktops only after loading its
    configuration and theme, so a panel started on the first alone slept a second now and then
    (1 start in 20 in a container, every start in a slow VM).
    """
    root = dpy.screen().root
    check = root.get_full_property(dpy.intern_atom("_NET_SUPPORTING_WM_CHECK"), X.AnyPropertyType)
    if check is None or not len(check.value):
        return False
    desktops = root.get_full_property(dpy.intern_atom("_NET_NUMBER_OF_DESKTOPS"), X.AnyPropertyType)
    if desktops is None or not len(desktops.value) or int(desktops.value[0]) < 1:
        return False
    try:
        dpy.create_resource_object("window", int(check.value[0])).get_attributes()
    except error.XError:
        return False
    return True


def wait_for(dpy: display.Display, what: str, timeout_s: float) -> bool:
    """Wait until ``what`` (``wm`` or ``panel``) is up, looking again when the X server reports
    a change that could mean it (module docstring); False (with a line on stderr) after
    ``timeout_s`` seconds."""
    wanted = panel_colour() if what == "panel" else None
    root = dpy.screen().root
    corner = (2, dpy.screen().height_in_pixels - 2)
    watch = None
    if wanted is None:
        root.change_attributes(event_mask=X.PropertyChangeMask)
    elif dpy.has_extension("DAMAGE"):
        dpy.damage_query_version()
        watch = root.damage_create(damage.DamageReportRawRectangles)
    damage_event = dpy.query_extension("DAMAGE").first_event if watch is not None else None
    dpy.sync()
    deadline = time.monotonic() + timeout_s
    seen = (0, 0, 0)
    look = True
    try:
        while True:
            if look:
                if wanted is None:
                    if wm_running(dpy):
                        return True
                else:
                    seen = corner_pixel(dpy)
                    if seen == wanted:
                        return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if not dpy.pending_events():
                select.select([dpy.fileno()], [], [], min(remaining, FALLBACK_POLL_S))
            look = not dpy.pending_events()  # a timeout: look anyway
            for _ in range(dpy.pending_events()):
                event = dpy.next_event()
                if wanted is None:
                    look = look or event.type == X.PropertyNotify
                elif event.type == damage_event:
                    area = event.area
                    look = look or (
                        area.x <= corner[0] < area.x + area.width
                        and area.y <= corner[1] < area.y + area.height
                    )
    finally:
        if wanted is None:
            root.change_attributes(event_mask=X.NoEventMask)
        if watch is not None:
            dpy.damage_destroy(watch)
        dpy.sync()
    if wanted is None:
        print(f"desktop_ready: no window manager within {timeout_s:.0f} s", file=sys.stderr)
    else:
        print(
            f"desktop_ready: the panel was not drawn within {timeout_s:.0f} s "
            f"(corner pixel {seen}, panel colour {wanted})",
            file=sys.stderr,
        )
    return False


def main(argv: list[str]) -> int:
    """``wm|panel [TIMEOUT_S]``, or ``wm panel [TIMEOUT_S]``: both in turn in one process (the
    supervisor's way: one start-up instead of two), each at most ``TIMEOUT_S`` and each
    announced on stdout as ``<what> ready`` or ``<what> late`` when its wait ends, so the caller
    starts the panel once the window manager runs."""
    args = argv[1:]
    timeout_s = 10.0
    if args and args[-1] not in ("wm", "panel"):
        try:
            timeout_s = float(args.pop())
        except ValueError:
            args = []
    if args not in (["wm"], ["panel"], ["wm", "panel"]):
        print("usage: desktop_ready.py wm|panel|'wm panel' [TIMEOUT_S]", file=sys.stderr)
        return 2
    dpy = display.Display()
    ready = True
    try:
        for what in args:
            ok = wait_for(dpy, what, timeout_s)
            ready = ready and ok
            if len(args) > 1:
                print(f"{what} {'ready' if ok else 'late'}", flush=True)
    finally:
        dpy.close()
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
