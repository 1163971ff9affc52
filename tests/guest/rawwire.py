"""A raw protocol connection for tests that must send what a well-behaved client never would."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from cubicle_guest import protocol


class RawConnection:
    """A unix socket to the agent; send bytes, read decoded reply frames. Caller closes it."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.decoder = protocol.FrameDecoder()
        self.frames: list[protocol.Frame] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(
        self, request_id: Any, op: str, args: dict[str, Any] | None = None, blob: bytes = b""
    ) -> None:
        self.send(protocol.encode_frame({"id": request_id, "op": op, "args": args or {}}, blob))

    def read_until(self, predicate: Any, timeout: float = 10.0) -> list[protocol.Frame]:
        """Read replies until ``predicate(frames)``; return all frames read so far."""
        deadline = time.monotonic() + timeout
        while not predicate(self.frames):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no matching reply within {timeout} s; got "
                    f"{[f.message for f in self.frames][-5:]}"
                )
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 20)
            if not data:
                raise AssertionError("agent closed the connection")
            self.frames.extend(self.decoder.feed(data))
        return self.frames

    def reply_to(self, request_id: Any, timeout: float = 10.0) -> protocol.Frame:
        frames = self.read_until(
            lambda fs: any(f.message.get("id") == request_id for f in fs), timeout
        )
        return next(f for f in frames if f.message.get("id") == request_id)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
