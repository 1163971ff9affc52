"""Protocol robustness against a live agent: random bytes, frames and requests never crash it,
every malformed request gets an error reply, and a valid hello works afterwards."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cubicle_guest import protocol
from tests.guest.rawwire import RawConnection
from tests.support.agent import RunningAgent

pytestmark = pytest.mark.x11

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ops that are safe to call with arbitrary arguments (no sleeping, no files, no programs)
SAFE_OPS = [
    "hello",
    "info",
    "click",
    "double_click",
    "move",
    "drag",
    "scroll",
    "keypress",
    "type",
    "screenshot",
    "windows",
    "release_all",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _hello_works(conn: RawConnection, tag: str) -> None:
    conn.request(tag, "hello", {"protocol": protocol.PROTOCOL_VERSION})
    reply = conn.reply_to(tag)
    assert reply.message["ok"] is True, reply.message
    assert reply.message["result"]["protocol"] == protocol.PROTOCOL_VERSION


def _assert_well_formed(message: dict[str, Any]) -> None:
    assert isinstance(message.get("ok"), bool), message
    if message["ok"]:
        assert isinstance(message.get("result"), dict)
    else:
        error = message["error"]
        assert error["code"] in protocol.ERROR_CODES
        assert isinstance(error["message"], str) and error["message"]


@FUZZ
@given(junk=st.binary(min_size=1, max_size=2048).filter(lambda b: protocol.MAGIC not in b))
def test_random_bytes_get_bad_frame_replies_then_hello_works(
    agent: RunningAgent, junk: bytes
) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.send(junk)
        _hello_works(conn, "after-junk")
        errors = [f.message for f in conn.frames if f.message.get("id") != "after-junk"]
        assert errors, "junk got no error reply"
        assert all(
            m["ok"] is False and m["error"]["code"] == "bad_frame" and m["id"] is None
            for m in errors
        ), errors
    assert agent.alive()


@FUZZ
@given(body=st.binary(max_size=512), blob=st.binary(max_size=64))
def test_random_frame_bodies_get_one_reply_each(
    agent: RunningAgent, body: bytes, blob: bytes
) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.send(protocol.FRAME_HEADER.pack(protocol.MAGIC, len(body), len(blob)) + body + blob)
        _hello_works(conn, "after-frame")
        others = [f.message for f in conn.frames if f.message.get("id") != "after-frame"]
        assert len(others) == 1
        _assert_well_formed(others[0])
        assert others[0]["ok"] is False
    assert agent.alive()


@FUZZ
@given(
    request_id=json_values,
    op=st.sampled_from(SAFE_OPS) | st.text(max_size=12),
    args=st.dictionaries(
        st.sampled_from(
            [
                "x",
                "y",
                "keys",
                "text",
                "button",
                "path",
                "scroll_x",
                "scroll_y",
                "protocol",
                "format",
                "region",
                "max_width",
                "quality",
                "bogus",
            ]
        ),
        json_values,
        max_size=5,
    )
    | json_values,
    extra=st.booleans(),
)
def test_random_requests_get_well_formed_replies(
    agent: RunningAgent, request_id: Any, op: str, args: Any, extra: bool
) -> None:
    message: dict[str, Any] = {"id": request_id, "op": op, "args": args}
    if extra:
        message["surprise"] = 1
    with RawConnection(agent.socket_path) as conn:
        conn.send(protocol.encode_frame(message))
        conn.read_until(lambda fs: len(fs) >= 1)
        reply = conn.frames[0].message
        _assert_well_formed(reply)
        valid_id = isinstance(request_id, (int, str)) and not isinstance(request_id, bool)
        assert reply["id"] == (request_id if valid_id else None)
        if not valid_id or extra or op not in protocol.OPS:
            assert reply["ok"] is False
        _hello_works(conn, "after-request")
    assert agent.alive()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (struct.pack("!4sII", b"CBL1", protocol.MAX_JSON_BYTES + 1, 0), "exceed the limits"),
        (struct.pack("!4sII", b"CBL1", 2, protocol.MAX_BLOB_BYTES + 1), "exceed the limits"),
        (struct.pack("!4sII", b"CBL1", 4, 0) + b"\xff\xfe{}", "not valid UTF-8 JSON"),
        (struct.pack("!4sII", b"CBL1", 2, 0) + b"[]", "expected an object"),
        (b"GET / HTTP/1.1\r\n\r\n", "no magic"),
    ],
)
def test_malformed_frames_are_named_and_the_stream_recovers(
    agent: RunningAgent, data: bytes, expected: str
) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.send(data)
        _hello_works(conn, "next")
        errors = [f.message["error"] for f in conn.frames if f.message.get("id") != "next"]
        assert errors and errors[0]["code"] == "bad_frame"
        assert expected in errors[0]["message"]


@pytest.mark.parametrize(
    ("message", "code", "named"),
    [
        ({"id": 1, "op": "fly", "args": {}}, "unknown_op", "'fly'"),
        ({"id": 2, "op": "click", "args": {"x": 1}}, "bad_args", "'y'"),
        ({"id": 3, "op": "click", "args": {"x": 1, "y": 2, "z": 3}}, "bad_args", "z"),
        ({"id": 4, "op": "click", "args": []}, "bad_args", "'args'"),
        ({"id": [5], "op": "info", "args": {}}, "bad_request", "'id'"),
        ({"id": 6, "op": 7, "args": {}}, "bad_request", "'op'"),
        ({"id": 7, "op": "hello", "args": {"protocol": 99}}, "version_mismatch", "99"),
        ({"id": 8, "op": "wait", "args": {"ms": protocol.MAX_WAIT_MS + 1}}, "bad_args", "60000"),
        ({"id": 9, "op": "wait", "args": {"ms": -1}}, "bad_args", "-1"),
        ({"id": 10, "op": "screenshot", "args": {"format": "gif"}}, "bad_args", "'format'"),
        (
            {"id": 11, "op": "screenshot", "args": {"quality": 0, "format": "jpeg"}},
            "bad_args",
            "quality",
        ),
        ({"id": 12, "op": "info", "args": {}, "extra": 1}, "bad_request", "extra"),
    ],
)
def test_bad_requests_get_named_errors(
    agent: RunningAgent, message: dict[str, Any], code: str, named: str
) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.send(protocol.encode_frame(message))
        reply = conn.read_until(lambda fs: len(fs) >= 1)[0].message
        assert reply["ok"] is False
        assert reply["error"]["code"] == code, reply
        assert named in reply["error"]["message"]
        _hello_works(conn, "after")


def test_blob_on_an_op_without_one_is_refused(agent: RunningAgent) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.request(1, "info", {}, blob=b"xyz")
        reply = conn.reply_to(1).message
        assert reply["error"]["code"] == "bad_args" and "3 bytes" in reply["error"]["message"]


def test_truncated_frame_then_disconnect_leaves_agent_serving(agent: RunningAgent) -> None:
    frame = protocol.encode_frame(protocol.request(1, "info"))
    with RawConnection(agent.socket_path) as conn:
        conn.send(frame[: len(frame) // 2])
    with RawConnection(agent.socket_path) as conn:
        _hello_works(conn, "fresh")


def test_pipelined_requests_are_answered_in_order(agent: RunningAgent) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.send(
            b"".join(protocol.encode_frame(protocol.request(i, "info")) for i in range(20))
            + b"garbage"
            + protocol.encode_frame(protocol.request("last", "info"))
        )
        frames = conn.read_until(lambda fs: any(f.message.get("id") == "last" for f in fs))
        ids = [f.message["id"] for f in frames]
        assert ids == [*range(20), None, "last"]
        assert json.dumps(frames[0].message["result"]["screen"]) == '{"width": 1280, "height": 800}'
