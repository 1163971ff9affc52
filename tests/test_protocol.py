"""The wire protocol: frames round-trip, broken frames are named and skipped, args checked."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cubicle_guest import protocol
from cubicle_guest.errors import GuestError, ProtocolError


def test_frame_round_trip_with_blob_split_at_every_byte() -> None:
    data = protocol.encode_frame(
        {"id": 1, "op": "type", "args": {"text": "Grêmio 日本"}}, b"\x00\xffblob"
    )
    decoder = protocol.FrameDecoder()
    frames = []
    for i in range(len(data)):
        frames += decoder.feed(data[i : i + 1])
    assert len(frames) == 1
    assert frames[0].message["args"]["text"] == "Grêmio 日本"
    assert frames[0].blob == b"\x00\xffblob"
    assert decoder.pending == 0


def test_garbage_before_a_frame_is_reported_then_skipped() -> None:
    decoder = protocol.FrameDecoder()
    good = protocol.encode_frame({"id": 7, "op": "info", "args": {}})
    with pytest.raises(ProtocolError, match="no magic"):
        decoder.feed(b"junk!" + good)
    assert [f.message["id"] for f in decoder.feed(b"")] == [7]


def test_oversized_header_is_refused_without_buffering_the_body() -> None:
    header = protocol.FRAME_HEADER.pack(protocol.MAGIC, protocol.MAX_JSON_BYTES + 1, 0)
    decoder = protocol.FrameDecoder()
    with pytest.raises(ProtocolError, match="exceed the limits"):
        decoder.feed(header)
    assert decoder.pending < len(header)


@pytest.mark.parametrize(
    ("payload", "match"),
    [(b"\xff\xfe", "not valid UTF-8 JSON"), (b"[1, 2]", "expected an object"), (b"{", "not valid")],
    ids=["not-utf8", "not-object", "truncated-json"],
)
def test_malformed_json_part_is_named(payload: bytes, match: str) -> None:
    frame = protocol.FRAME_HEADER.pack(protocol.MAGIC, len(payload), 0) + payload
    with pytest.raises(ProtocolError, match=match):
        protocol.FrameDecoder().feed(frame)


def test_encode_refuses_oversized_blob() -> None:
    with pytest.raises(ProtocolError, match="over the limit"):
        protocol.encode_frame({}, b"x" * (protocol.MAX_BLOB_BYTES + 1))


@pytest.mark.parametrize(
    ("op", "args", "code", "match"),
    [
        ("zoom", {}, "unknown_op", "unknown op 'zoom'"),
        ("click", {"x": 1}, "bad_args", "missing required argument 'y'"),
        ("click", {"x": 1.5, "y": 2}, "bad_args", "'x' must be an integer"),
        ("click", {"x": True, "y": 2}, "bad_args", "'x' must be an integer"),
        ("click", {"x": 1, "y": 2, "speed": 3}, "bad_args", "unknown argument"),
        ("drag", {"path": [{"x": 1}]}, "bad_args", "'path' must be"),
        ("exec", {"argv": []}, "bad_args", "non-empty list"),
        ("exec", {"argv": "ls -l"}, "bad_args", "non-empty list"),
        ("keypress", {"keys": ["ctrl", 3]}, "bad_args", "list of key names"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_validate_args_names_what_is_wrong(
    op: str, args: dict[str, object], code: str, match: str
) -> None:
    with pytest.raises(GuestError, match=match) as info:
        protocol.validate_args(op, args)
    assert info.value.code == code


def test_blob_only_where_the_op_takes_one() -> None:
    assert protocol.validate_args("write_file", {"path": "/tmp/x"}, b"data") == {"path": "/tmp/x"}
    with pytest.raises(GuestError, match="takes no binary payload"):
        protocol.validate_args("click", {"x": 1, "y": 1}, b"data")


def test_parse_reply_maps_error_replies_to_guest_error() -> None:
    reply = protocol.error_reply(
        3, "unknown_key", "unknown key 'Hyperspace'", {"key": "Hyperspace"}
    )
    with pytest.raises(GuestError) as info:
        protocol.parse_reply(reply, op="keypress")
    assert info.value.code == "unknown_key"
    assert info.value.details == {"key": "Hyperspace"}
    assert "keypress" in str(info.value) and "Hyperspace" in str(info.value)
    assert protocol.parse_reply(protocol.ok_reply(3, {"a": 1})) == {"a": 1}
    with pytest.raises(ProtocolError, match="no boolean 'ok'"):
        protocol.parse_reply({"id": 3})


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_decoder_never_raises_anything_but_protocol_error(data: bytes) -> None:
    decoder = protocol.FrameDecoder()
    for _ in range(3):  # each broken frame raises once, then the decoder moves on
        try:
            decoder.feed(data)
            data = b""
        except ProtocolError:
            data = b""
    good = protocol.encode_frame({"id": "after", "op": "info", "args": {}})
    frames: list[protocol.Frame] = []
    for _ in range(4):
        try:
            frames += decoder.feed(good)
            break
        except ProtocolError:
            good = b""
    frames += _drain(decoder)
    assert any(f.message.get("id") == "after" for f in frames) or decoder.pending > 0


def _drain(decoder: protocol.FrameDecoder) -> list[protocol.Frame]:
    out: list[protocol.Frame] = []
    for _ in range(8):
        try:
            return out + decoder.feed(b"")
        except ProtocolError:
            continue
    return out


def test_messages_are_compact_utf8_json() -> None:
    data = protocol.encode_frame(protocol.request(1, "type", {"text": "日本"}))
    body = data[protocol.FRAME_HEADER.size :]
    assert json.loads(body.decode("utf-8")) == {"id": 1, "op": "type", "args": {"text": "日本"}}
    assert "日本".encode() in body
