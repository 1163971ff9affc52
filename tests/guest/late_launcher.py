"""A panel launcher whose program draws its first window late:
``python late_launcher.py DELAY_S``.

Maps a 100x40 "launcher" at the top left of the screen and prints ``ready``. A click on it does
what tint2 and a slow program do together: broadcast a startup-notification ``new:`` message
(as libstartup-notification does), map a 200x150 window of one flat colour at (300, 200) — a
program that mapped its window but drew nothing yet — and fill a black 100x60 block into it
``DELAY_S`` seconds later (its first frame). Each click starts one more such launch. A right
click instead starts an animation and no launch: the launcher flips between black and grey every
50 ms from then on.
"""

from __future__ import annotations

import select
import sys
import time

from Xlib import X, Xatom
from Xlib import display as xdisplay
from Xlib.protocol import event
from Xlib.xobject.drawable import Window

LAUNCHER = (0, 0, 100, 40)
"""x, y, width, height of the launcher (screen pixels)."""
APP = (300, 200, 200, 150)
"""x, y, width, height of each launched program's window (screen pixels)."""
FIRST_FRAME = (20, 20, 100, 60)
"""The block the program draws into its window, window pixels."""
FRAME_S = 0.05
"""The animation's frame interval (seconds)."""


def broadcast(display: xdisplay.Display, text: str) -> None:
    """Send a startup-notification message the way libstartup-notification does: 20-byte
    ``_NET_STARTUP_INFO_BEGIN`` / ``_NET_STARTUP_INFO`` client messages to the root window."""
    root = display.screen().root
    sender = root.create_window(0, 0, 1, 1, 0, X.CopyFromParent, override_redirect=True)
    data = text.encode() + b"\0"
    begin = display.intern_atom("_NET_STARTUP_INFO_BEGIN")
    more = display.intern_atom("_NET_STARTUP_INFO")
    for index in range(0, len(data), 20):
        chunk = data[index : index + 20].ljust(20, b"\0")
        message = event.ClientMessage(
            window=sender, client_type=begin if index == 0 else more, data=(8, chunk)
        )
        root.send_event(message, event_mask=X.PropertyChangeMask)
    display.flush()


def _top_level(display: xdisplay.Display, geometry: tuple[int, int, int, int]) -> Window:
    """A mapped top-level window with ``WM_STATE`` (what a window manager marks a client with)."""
    x, y, width, height = geometry
    screen = display.screen()
    window = screen.root.create_window(
        x, y, width, height, 0, X.CopyFromParent, background_pixel=screen.white_pixel
    )
    state = display.intern_atom("WM_STATE")
    window.change_property(state, state, 32, [1, 0])
    window.change_property(Xatom.WM_NAME, Xatom.STRING, 8, b"late app")
    return window


def main(delay_s: float) -> None:
    display = xdisplay.Display()
    screen = display.screen()
    launcher = screen.root.create_window(
        *LAUNCHER,
        0,
        X.CopyFromParent,
        background_pixel=screen.black_pixel,
        override_redirect=True,
        event_mask=X.ButtonPressMask,
    )
    launcher.map()
    display.sync()
    print("ready", flush=True)
    due: list[tuple[float, Window]] = []
    launches = frames = 0
    next_frame: float | None = None
    grey = launcher.create_gc(foreground=0x808080)
    black = launcher.create_gc(foreground=screen.black_pixel)
    while True:
        times = [t for t in (due[0][0] if due else None, next_frame) if t is not None]
        timeout = max(0.0, min(times) - time.monotonic()) if times else None
        if not display.pending_events():
            select.select([display.fileno()], [], [], timeout)
        for _ in range(display.pending_events()):
            press = display.next_event()
            if press.type != X.ButtonPress:
                continue
            if press.detail == 3:
                next_frame = time.monotonic()
                continue
            launches += 1
            broadcast(display, f'new: ID="late/{launches}" NAME=Late BIN=late')
            window = _top_level(display, APP)
            window.map()
            display.sync()
            due.append((time.monotonic() + delay_s, window))
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, window = due.pop(0)
            gc = window.create_gc(foreground=screen.black_pixel)
            window.fill_rectangle(gc, *FIRST_FRAME)
            display.sync()
        if next_frame is not None and next_frame <= now:
            frames += 1
            launcher.fill_rectangle(grey if frames % 2 else black, 0, 0, *LAUNCHER[2:])
            display.sync()
            next_frame = now + FRAME_S


if __name__ == "__main__":
    main(float(sys.argv[1]))
