"""A VNC client of the tests' own (not noVNC): it speaks RFB 3.8 over the view server's
WebSocket and ignores the page's view-only flag, as a hostile viewer would."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from typing import Any

import requests
from websockets.sync.client import connect as ws_connect

__all__ = ["RfbSession", "rfb_session", "session_cookie_for"]


class RfbSession:
    """An RFB session past its handshake (ClientInit sent, ServerInit read)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.buffer = b""
        self.size = (0, 0)

    def read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            data: Any = self.ws.recv(timeout=20)
            self.buffer += data if isinstance(data, bytes) else data.encode()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def handshake(self) -> None:
        version = self.read(12)
        assert version.startswith(b"RFB 003."), version
        self.ws.send(b"RFB 003.008\n")
        count = self.read(1)[0]
        types = self.read(count)
        assert 1 in types, f"x11vnc offered {types!r}"
        self.ws.send(bytes([1]))
        assert self.read(4) == b"\0\0\0\0"
        self.ws.send(bytes([1]))  # ClientInit, shared
        self.size = struct.unpack(">HH", self.read(4))
        self.read(16)
        self.read(struct.unpack(">I", self.read(4))[0])

    def click(self, x: int, y: int) -> None:
        """Button 1 down and up at screen pixel (x, y), then a FramebufferUpdateRequest whose
        answer proves x11vnc read (and delivered or dropped) the clicks."""
        self.ws.send(struct.pack(">BBHH", 5, 1, x, y) + struct.pack(">BBHH", 5, 0, x, y))
        self.ws.send(struct.pack(">BBHHHH", 3, 0, 0, 0, 16, 16))
        assert self.read(1) == b"\0"


@contextlib.contextmanager
def rfb_session(port: int, cookie: str) -> Iterator[RfbSession]:
    """An RFB session through the view server on ``port`` with the session ``cookie``."""
    with ws_connect(
        f"ws://127.0.0.1:{port}/websockify",
        origin=f"http://127.0.0.1:{port}",  # type: ignore[arg-type]
        additional_headers={"Cookie": f"cubicle_view={cookie}"},
        subprotocols=["binary"],  # type: ignore[list-item]
        open_timeout=20,
    ) as ws:
        session = RfbSession(ws)
        session.handshake()
        yield session


def session_cookie_for(url: str) -> str:
    """Spend the one-time token of a view link (``http://127.0.0.1:PORT/#t=TOKEN``) as the page
    does, and return the session cookie the server set."""
    base, token = url.split("#t=")
    reply = requests.post(
        base + "api/session", json={"token": token}, headers={"X-Cubicle-View": "1"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    return reply.cookies["cubicle_view"]
