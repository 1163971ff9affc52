"""The RFB input tap: a person's clicks and key presses (never the keys) from a viewer's bytes."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cubicle.orchestrator.view.inputs import RfbInputTap, append_input, read_inputs

# what noVNC 1.3 sent to x11vnc in a takeover session (captured), then a click at (123, 456)
NOVNC = bytes.fromhex(
    "524642203030332e3030380a"
    "01"
    "01"
    "000000002018000100ff00ff00ff000810000000"
    "0200000300000007fffffefcffffff21"  # SetEncodings (3 encodings)
    "03000000000005000320"
    "06000000fffffff81f00000100000000"  # extended clipboard caps: negative length
    "03010000000005000320"
    "0500007b01c8"
    "0501007b01c8"
    "0500007b01c8"
)
KEYS = (
    struct.pack(">BBxxI", 4, 1, 0x61)  # 'a' down
    + struct.pack(">BBxxI", 4, 0, 0x61)  # up
    + struct.pack(">BBHII", 255, 0, 1, 0x62, 48)  # QEMU extended key 'b' down
    + struct.pack(">BBHII", 255, 0, 0, 0x62, 48)
)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_clicks_and_key_presses_are_noted_across_any_split(chunk: int) -> None:
    events: list[dict[str, object]] = []
    tap = RfbInputTap(events.append)
    data = NOVNC + KEYS
    for start in range(0, len(data), chunk):
        assert tap.feed(data[start : start + chunk])
    assert events == [
        {"kind": "click", "button": 1, "x": 123, "y": 456},
        {"kind": "key"},
        {"kind": "key"},
    ]
    assert "97" not in str(events) and "a" not in [str(v) for e in events for v in e.values()]


def test_an_unknown_message_stops_the_tap_instead_of_guessing() -> None:
    events: list[dict[str, object]] = []
    tap = RfbInputTap(events.append)
    assert not tap.feed(NOVNC[:14] + bytes([77]) + bytes.fromhex("0500007b01c8"))
    assert tap.stopped is not None and "77" in tap.stopped
    assert events == []


def test_inputs_file_is_private_and_read_by_time(tmp_path: Path) -> None:
    path = tmp_path / "x.input.jsonl"
    append_input(path, {"kind": "key"})
    assert path.stat().st_mode & 0o777 == 0o600
    [event] = read_inputs(path, 0, 2**40)
    assert event["kind"] == "key"
    assert read_inputs(path, 2**40, 2**41) == []
