"""What a passing pixels-only play of a shipped task's script leaves in its trajectory, whichever
command played it: ``cubicle drill --all`` (tests/drill/test_drill_docker.py, the ``toolset``
loop) and ``cubicle eval --oracle`` (tests/eval, the ``runner`` loop) — together every shipped
task on both loops in ``make test``."""

from __future__ import annotations

from typing import Any

__all__ = ["MODEL_VIEW", "assert_pixels_only_play"]

MODEL_VIEW = [1024, 640]
"""What the scripted model sees of the 1280x800 screen."""


def assert_pixels_only_play(events: list[dict[str, Any]], what: object) -> None:
    """The set-up happened before the first model turn (afterwards only the model acts); the
    trajectory holds only the screenshots the model received, one per turn with computer calls,
    each at the model's view; every expectation of the script was seen. ``what`` names the run in
    a failure."""
    kinds = [e["kind"] for e in events]
    first_turn = kinds.index("model_turn")
    assert "guest_wait" not in kinds[first_turn:], what
    shots = [e for e in events if e["kind"] == "screenshot"]
    calls = [e for e in events if e["kind"] == "model_turn" and e.get("calls")]
    assert len(shots) == len(calls), (what, len(shots), len(calls))
    assert all(s.get("note") is None for s in shots), what
    assert all(s["size"] == MODEL_VIEW for s in shots), what
    seen = [e for e in events if e["kind"] == "expectation"]
    assert seen and all(e["ok"] for e in seen), what
