"""A window whose key presses have effects at known delays:
``python tk_effects.py [--animate] [--dialog] [--pid]``.

Maps a full-screen override-redirect canvas with the keyboard focus (so keys reach it with or
without a window manager, wherever the pointer is) and prints ``ready``.
Keys: ``d`` paints a 300x200 red block 250 ms later; ``s`` paints a blue block at once and a green
one 150 ms after it; ``b`` and Return paint a 200x200 block at once, yellow and purple in turn;
``w`` paints an orange block at once, then works (a thread spins a CPU) for 250 ms and paints a cyan
block when done; ``p`` draws as a page loading in steps on a slow machine: a grey block at once,
then works 300 ms and paints a pink block, then works 300 ms more and paints a teal block (the work
in Tk's thread, with 20 ms idle between steps, when Tk draws); ``t`` ticks a panel clock 100 ms
later, as tint2 does when its clock turns a minute: it repaints a full-width 40 px strip at the
bottom (drawn by the first ``t``) with identical pixels but for one 10x11 "digit", which flips
colour (tint2 damages its whole 1280x40 panel and changes 10x11 pixels, measured with python-xlib
DAMAGE); ``c`` clears the canvas; any other key does nothing.
With ``--animate`` a 40x40 square moves along the top right corner every 40 ms, forever (with
``--animate-cpu`` each frame also uses 8 ms of CPU: an animated page's program). With ``--dialog``
the window's EWMH type is ``dialog`` (otherwise unset: ``normal``). With ``--pid`` the window names
its process (``_NET_WM_PID``, as GTK and Chromium windows do; Tk does not), so the agent's busy
probe can watch it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import tkinter
from collections.abc import Callable

from Xlib import X, Xatom, display


def _focus(window_id: int) -> None:
    """Give the window the X input focus, as a window manager would (Tk cannot for an
    override-redirect window: the focus stays PointerRoot, and no window counts as focused)."""
    connection = display.Display()
    try:
        window = connection.create_resource_object("window", window_id)
        window.set_input_focus(X.RevertToPointerRoot, X.CurrentTime)
        connection.sync()
    finally:
        connection.close()


def name_process(window_id: int) -> None:
    connection = display.Display()
    try:
        window = connection.create_resource_object("window", window_id)
        root = connection.screen().root
        while True:  # up to the top-level window (a child of the root), which the agent reads
            window.change_property(
                connection.intern_atom("_NET_WM_PID"), Xatom.CARDINAL, 32, [os.getpid()]
            )
            parent = window.query_tree().parent
            if not parent or parent.id == root.id:
                break
            window = parent
        connection.sync()
    finally:
        connection.close()


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def work_then(root: tkinter.Tk, seconds: float, paint: Callable[[], object]) -> None:
    """Use a CPU for ``seconds`` (a thread of this process spins), then ``paint`` (in Tk's
    thread)."""
    worker = threading.Thread(target=_spin, args=(seconds,), daemon=True)
    worker.start()

    def when_done() -> None:
        if worker.is_alive():
            root.after(5, when_done)
        else:
            paint()

    root.after(5, when_done)


def main() -> None:
    root = tkinter.Tk()
    root.overrideredirect(True)
    width, height = root.winfo_screenwidth(), root.winfo_screenheight()
    root.geometry(f"{width}x{height}+0+0")
    canvas = tkinter.Canvas(
        root, width=width, height=height, background="white", highlightthickness=0
    )
    canvas.pack()

    def key(event: tkinter.Event[tkinter.Misc]) -> None:
        if event.char == "d":
            root.after(250, lambda: canvas.create_rectangle(0, 0, 300, 200, fill="red", width=0))
        elif event.char == "s":
            canvas.create_rectangle(0, 200, 150, 400, fill="blue", width=0)
            root.after(
                150, lambda: canvas.create_rectangle(150, 200, 300, 400, fill="green", width=0)
            )
        elif event.char == "b" or event.keysym == "Return":
            flip[0] = not flip[0]
            colour = "yellow" if flip[0] else "purple"
            canvas.create_rectangle(400, 200, 600, 400, fill=colour, width=0)
        elif event.char == "w":
            canvas.create_rectangle(700, 200, 800, 300, fill="orange", width=0)
            work_then(
                root,
                0.25,
                lambda: canvas.create_rectangle(800, 200, 900, 300, fill="cyan", width=0),
            )
        elif event.char == "p":
            canvas.create_rectangle(700, 400, 800, 500, fill="grey", width=0)
            root.after(20, page_step, ["pink", "teal"])
        elif event.char == "t":
            root.after(100, tick)
        elif event.char == "c":
            canvas.delete("block")
            canvas.delete("all")
            if square is not None:
                canvas.create_rectangle(*coords, fill="black", width=0, tags="square")

    flip = [False]
    ticks = [0]

    def page_step(steps: list[str], x: int = 800) -> None:
        """Work 300 ms in Tk's own thread (a renderer's main thread), draw the next block, and
        let Tk's loop flush it to the X server before the next step."""
        _spin(0.3)
        canvas.create_rectangle(x, 400, x + 100, 500, fill=steps[0], width=0)
        if steps[1:]:
            root.after(20, page_step, steps[1:], x + 100)

    def tick() -> None:
        canvas.delete("panel")  # drawn anew whole: the whole strip is damaged
        canvas.create_rectangle(
            0, height - 40, width, height, fill="#20242c", width=0, tags="panel"
        )
        ticks[0] += 1
        digit = "#eceff4" if ticks[0] % 2 else "#d8dee9"
        x, y = width - 22, height - 26
        canvas.create_rectangle(x, y, x + 10, y + 11, fill=digit, width=0, tags="panel")

    if "--dialog" in sys.argv:
        root.wm_attributes("-type", "dialog")
    root.bind_all("<Key>", key)
    burn = "--animate-cpu" in sys.argv
    square = "square" if "--animate" in sys.argv or burn else None
    coords = [500, 0, 540, 40]

    def step(offset: int = 0) -> None:
        canvas.delete("square")
        x = 460 + offset % 100
        coords[:] = [x, 0, x + 40, 40]
        canvas.create_rectangle(*coords, fill="black", width=0, tags="square")
        if burn:
            _spin(0.008)
        root.after(40, step, offset + 9)

    if square is not None:
        step()
    while not canvas.winfo_viewable():
        root.update()
    canvas.focus_force()
    root.update()
    if "--pid" in sys.argv:
        name_process(int(root.wm_frame(), 16))
    _focus(int(root.wm_frame(), 16))
    print("ready", flush=True)
    root.mainloop()


if __name__ == "__main__":
    main()
