"""A real text widget for typing tests: ``python tests/guest/tk_text.py`` on $DISPLAY.

Maps a full-screen Tk ``Text`` at 0,0 with the keyboard focus, prints ``ready`` on stdout, then
answers commands on stdin, one per line: ``get`` prints the content as a JSON string, ``clear``
empties it and prints ``ok``. EOF on stdin quits.
"""

from __future__ import annotations

import json
import os
import tkinter


def main() -> None:
    root = tkinter.Tk()
    root.overrideredirect(True)
    width, height = root.winfo_screenwidth(), root.winfo_screenheight()
    root.geometry(f"{width}x{height}+0+0")
    text = tkinter.Text(root, undo=False)
    text.pack(fill="both", expand=True)

    pending = bytearray()

    def command(_file: object, _mask: int) -> None:
        data = os.read(0, 4096)  # unbuffered: the file handler fires per readable chunk
        if not data:
            root.destroy()
            return
        pending.extend(data)
        while b"\n" in pending:
            line, _, rest = bytes(pending).partition(b"\n")
            pending[:] = rest
            answer(line.decode().strip())

    def answer(line: str) -> None:
        if line == "get":
            root.update()  # process every queued key event first
            print(json.dumps(text.get("1.0", "end-1c")), flush=True)
        elif line == "clear":
            text.delete("1.0", "end")
            print("ok", flush=True)
        elif line == "focus":
            text.focus_force()
            root.update()
            print("ok", flush=True)

    while not text.winfo_viewable():
        root.update()
    text.focus_force()
    root.update()
    root.tk.createfilehandler(0, tkinter.READABLE, command)
    print("ready", flush=True)
    root.mainloop()


if __name__ == "__main__":
    main()
