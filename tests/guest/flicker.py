"""A real X client that keeps repainting windows, as fast as the server takes it, for the frame
cache's tearing test: ``python -m tests.guest.flicker DISPLAY X,Y,W,H[@N][:RGB,RGB] ...``.

Each window is an override-redirect window at its rectangle; each repaint fills a whole window
in ONE request (PolyFillRectangle), every turn or, with ``@N``, every N-th turn (one turn per
round trip), alternating between the window's two colours (default: red and blue), so at any
moment the server holds each window in one of its colours, never a mix.
Prints ``ready`` once every window is mapped and painted; runs until killed.
"""

from __future__ import annotations

import sys
from typing import Any

from tests.guest.paint import Painter


def main(argv: list[str]) -> None:
    painter = Painter(argv[0])  # its windows: override-redirect, mapped, painted, synced
    connection = painter.display
    windows: list[tuple[Any, int, int, list[Any], int]] = []
    for spec in argv[1:]:
        place, _, colours = spec.partition(":")
        box, _, period = place.partition("@")
        x, y, width, height = (int(part) for part in box.split(","))
        pair = [int(c, 16) for c in colours.split(",")] if colours else [0xFF0000, 0x0000FF]
        window = painter.rect(x, y, width, height, pair[0])
        gcs = [window.create_gc(foreground=colour) for colour in pair]
        windows.append((window, width, height, gcs, int(period or 1)))
    print("ready", flush=True)
    turn = 0
    while True:
        turn += 1
        for window, width, height, gcs, every in windows:
            if turn % every == 0:
                window.fill_rectangle(gcs[turn // every % 2], 0, 0, width, height)
        connection.sync()  # one turn at a time: the server paces the loop


if __name__ == "__main__":
    main(sys.argv[1:])
