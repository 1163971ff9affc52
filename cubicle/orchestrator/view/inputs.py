"""What a person did during a hand-over, read from the VNC stream (client → guest).

:class:`RfbInputTap` follows the RFB messages a viewer sends (RFB 3.8 with security type None,
as x11vnc ``-nopw`` offers) and reports each pointer button press (button, x, y in screen
pixels) and each key press — *without the key*: a person may type a password while they hold
control, and the trajectory must not keep it. The view server appends them to
``<view dir>/<id>.input.jsonl`` (0600) with the wall-clock time; the hand-over gate attaches the
ones between ``taken`` and ``released`` to the ``released`` event, so the trajectory marks the
person's actions. The server appends a paste there too, as ``{"kind": "paste"}`` without its
text (:mod:`cubicle.orchestrator.view.paste`). A message type it does not know stops the tap
(reported once): it never guesses.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

__all__ = ["RfbInputTap", "append_input", "read_inputs"]

HANDSHAKE: Final = 12 + 1 + 1
"""ProtocolVersion, the chosen security type, ClientInit."""
_FIXED: Final = {0: 20, 3: 10, 4: 8, 5: 6, 150: 10}
Event = dict[str, Any]


class RfbInputTap:
    """Feed it the client's bytes in order; ``on_event`` gets ``{"kind": "click", "button",
    "x", "y"}`` or ``{"kind": "key"}`` per press. ``stopped`` says why it gave up, if it did."""

    def __init__(self, on_event: Callable[[Event], None]) -> None:
        self.on_event = on_event
        self.stopped: str | None = None
        self._buffer = bytearray()
        self._skip = HANDSHAKE
        self._buttons = 0

    def feed(self, data: bytes) -> bool:
        """Take the next bytes the client sent. :return: False once the tap has stopped."""
        if self.stopped is not None:
            return False
        self._buffer += data
        if self._skip:
            taken = min(self._skip, len(self._buffer))
            del self._buffer[:taken]
            self._skip -= taken
        while self._buffer and self.stopped is None:
            size = self._size()
            if size is None or len(self._buffer) < size:
                break
            message = bytes(self._buffer[:size])
            del self._buffer[:size]
            self._handle(message)
        return self.stopped is None

    def _size(self) -> int | None:
        kind, buffer = self._buffer[0], self._buffer
        if kind in _FIXED:
            return _FIXED[kind]
        if kind == 2:  # SetEncodings
            return None if len(buffer) < 4 else 4 + 4 * struct.unpack_from(">H", buffer, 2)[0]
        if kind == 6:  # ClientCutText; a negative length is the extended-clipboard form
            return None if len(buffer) < 8 else 8 + abs(struct.unpack_from(">i", buffer, 4)[0])
        if kind == 248:  # ClientFence
            return None if len(buffer) < 9 else 9 + buffer[8]
        if kind == 251:  # SetDesktopSize
            return None if len(buffer) < 8 else 8 + 16 * buffer[6]
        if kind == 255:  # QEMU client message: only the extended key event (noVNC)
            if len(buffer) < 2:
                return None
            if buffer[1] == 0:
                return 12
        self.stopped = f"unknown RFB client message type {kind}"
        return None

    def _handle(self, message: bytes) -> None:
        kind = message[0]
        if kind == 5:
            _, mask, x, y = struct.unpack(">BBHH", message)
            pressed = mask & ~self._buttons
            self._buttons = mask
            for bit in range(8):
                if pressed & (1 << bit):
                    self.on_event({"kind": "click", "button": bit + 1, "x": x, "y": y})
        elif (kind == 4 and message[1]) or (
            kind == 255 and struct.unpack_from(">H", message, 2)[0]
        ):
            self.on_event({"kind": "key"})


def append_input(path: Path, event: Event) -> None:
    """Append ``event`` with the wall time ``at`` to the JSON-lines file ``path`` (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "a") as out:
        out.write(json.dumps({"at": time.time(), **event}) + "\n")


def read_inputs(path: Path, since: float, until: float) -> list[Event]:
    """The events of ``path`` recorded between ``since`` and ``until`` (wall time)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and since <= float(event.get("at", 0)) <= until:
            found.append(event)
    return found
