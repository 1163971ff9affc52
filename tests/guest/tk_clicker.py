"""A small window of its own program that works after a click: ``python tk_clicker.py`` (with
the repository on ``PYTHONPATH``).

Maps a 200x200 override-redirect window at (1000, 500) on top of everything, named with its
process (``_NET_WM_PID``), without taking the keyboard focus, and prints ``ready``. A left click
paints its left half orange at once, then works (a thread spins a CPU) for 250 ms and paints its
right half cyan when done. The agent's busy probe must watch this program although the focused
window belongs to another one.
"""

from __future__ import annotations

import tkinter

from tests.guest.tk_effects import name_process, work_then


def main() -> None:
    root = tkinter.Tk()
    root.overrideredirect(True)
    root.geometry("200x200+1000+500")
    canvas = tkinter.Canvas(root, width=200, height=200, background="white", highlightthickness=0)
    canvas.pack()

    def click(_event: tkinter.Event[tkinter.Misc]) -> None:
        canvas.create_rectangle(0, 0, 100, 200, fill="orange", width=0)
        work_then(
            root, 0.25, lambda: canvas.create_rectangle(100, 0, 200, 200, fill="cyan", width=0)
        )

    canvas.bind("<Button-1>", click)
    while not canvas.winfo_viewable():
        root.update()
    root.update()
    name_process(int(root.wm_frame(), 16))
    print("ready", flush=True)
    root.mainloop()


if __name__ == "__main__":
    main()
