"""A hostile in-guest agent (B3b): whatever it answers, the host's client raises an error of the
tree (``CubicleError``), never a ``RecursionError`` or another exception from outside it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cubicle import CubicleError
from cubicle_guest.client import connect_unix
from cubicle_guest.errors import ProtocolError
from cubicle_guest.protocol import FRAME_HEADER, MAGIC, FrameDecoder
from tests.support.unix_server import unix_server

pytestmark = pytest.mark.attack

DEPTH = 300_000


def _nested_reply() -> bytes:
    body = b'{"id":1,"ok":true,"result":' + b"[" * DEPTH
    return FRAME_HEADER.pack(MAGIC, len(body), 0) + body


def test_deeply_nested_json_from_the_agent_is_a_protocol_error(tmp_path: Path) -> None:
    def hostile(conn: socket.socket) -> None:
        conn.recv(65536)  # the hello request
        conn.sendall(_nested_reply())
        conn.recv(1)  # until the client hangs up

    path = tmp_path / "agent.sock"
    with (
        unix_server(path, hostile),
        connect_unix(path, timeout=5) as client,
        pytest.raises(CubicleError) as caught,
    ):
        client.hello(timeout=10.0)
    assert isinstance(caught.value, ProtocolError)
    assert "nests too deeply" in str(caught.value)


def test_the_decoder_goes_on_after_a_nested_frame() -> None:
    decoder = FrameDecoder()
    good = b'{"id":2,"ok":true,"result":{}}'
    items = decoder.feed_items(_nested_reply() + FRAME_HEADER.pack(MAGIC, len(good), 0) + good)
    assert isinstance(items[0], ProtocolError)
    assert [item.message for item in items[1:]] == [{"id": 2, "ok": True, "result": {}}]
