"""A window whose key presses have effects at known delays: ``python tk_effects.py [--animate]``.

Maps a full-screen override-redirect canvas with the keyboard focus (so keys reach it with or
without a window manager, wherever the pointer is) and prints ``ready``.
Keys: ``d`` paints a 300x200 red block 250 ms later; ``s`` paints a blue block at once and a
green one 150 ms after it; ``c`` clears the canvas; any other key does nothing. With
``--animate`` a 40x40 square moves along the top right corner every 40 ms, forever.
"""

from __future__ import annotations

import sys
import tkinter


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
        elif event.char == "c":
            canvas.delete("block")
            canvas.delete("all")
            if square is not None:
                canvas.create_rectangle(*coords, fill="black", width=0, tags="square")

    root.bind_all("<Key>", key)
    square = "square" if "--animate" in sys.argv else None
    coords = [500, 0, 540, 40]

    def step(offset: int = 0) -> None:
        canvas.delete("square")
        x = 460 + offset % 100
        coords[:] = [x, 0, x + 40, 40]
        canvas.create_rectangle(*coords, fill="black", width=0, tags="square")
        root.after(40, step, offset + 9)

    if square is not None:
        step()
    while not canvas.winfo_viewable():
        root.update()
    canvas.focus_force()
    root.update()
    print("ready", flush=True)
    root.mainloop()


if __name__ == "__main__":
    main()
