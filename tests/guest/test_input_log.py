"""The agent's input log (cubicle_guest/input_log.py): one private line per injected input
request, written before the input; nothing for requests that only look."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubicle_guest.input_log import INPUT_LOG_ENV, InputLog


def test_input_requests_are_logged_in_order_without_their_settle(tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    log = InputLog(str(path))
    log.append("click", {"x": 1, "y": 2, "button": "left", "settle": {"quiet_ms": 400}})
    log.append("screenshot", {"region": None})
    log.append("windows", {})
    log.append("type", {"text": "héllo"})
    assert path.stat().st_mode & 0o777 == 0o600
    lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    assert [(e["seq"], e["op"], e["args"]) for e in lines] == [
        (1, "click", {"x": 1, "y": 2, "button": "left"}),
        (2, "type", {"text": "héllo"}),
    ]


def test_the_log_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INPUT_LOG_ENV, "off")
    log = InputLog()
    log.append("click", {"x": 1, "y": 2})
    assert log.path is None
    assert list(tmp_path.iterdir()) == []
