"""``run()`` with Anthropic's and Gemini's models on a local desktop (Xvfb, openbox, the agent):
the real ``anthropic`` / ``google-genai`` client at a scripted stand-in, the provider's own loop,
and everything provider-neutral around it — the trajectory's actions, approvals and model turns,
a ``--policy`` file's ``actions`` naming Claude's members, Gemini's confirmation as a safety
check, stall detection, usage."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubicle.drivers.approvals import ApproveAll, FilePolicy, NonInteractive
from cubicle.drivers.policy_file import parse_policy
from cubicle.drivers.scripted_gemini import GeminiTurn, ScriptedGemini
from cubicle.drivers.scripted_messages import MessagesTurn, ScriptedMessages
from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.modelrun.provider_models import AnthropicModel, GeminiModel
from cubicle.orchestrator.modelrun.run import RunSpec, run
from cubicle.orchestrator.trajectory import read_trajectory
from tests.drill.desktop import LocalDesktop

pytestmark = pytest.mark.x11

NO_CLICKS_TOP_LEFT = """
version = 1
default = "allow"

[[rule]]
decision = "deny"
actions = ["left_click"]
region = { x = 0, y = 0, width = 640, height = 400 }
note = "no clicks in the top-left quarter"
"""


def test_a_claude_run_records_every_member_and_its_policy_file_judges_claudes_members(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    turns: list[MessagesTurn] = [
        [("screenshot", {}), ("left_click", {"coordinate": [100, 100]}, "error")],
        [
            ("left_click", {"coordinate": [500, 300]}),
            ("key", {"text": "ctrl+a"}),
            ("screenshot", {}),
        ],
        "done",
    ]
    policy = FilePolicy(parse_policy(NO_CLICKS_TOP_LEFT, "p.toml"))
    spec = RunSpec(
        out=tmp_path / "out",
        loop="tool_runner",
        prompt="go",
        viewport=Viewport.exact(640, 400),
        max_steps=5,
        safety_policy=ApproveAll(),
        action_policy=policy,
    )
    with ScriptedMessages(turns) as stand_in:
        model = AnthropicModel("claude-test", api_key="k", base_url=stand_in.base_url)
        result = run(local_desktop, spec, model)
    assert result.ok, result.error
    assert (result.provider, result.final_message) == ("anthropic", "done")
    events = read_trajectory(tmp_path / "out")
    denied = [e for e in events if e["kind"] == "approval" and not e["allowed"]]
    assert [
        (e["detail"], "no clicks in the top-left" in e["by"] + e["reason"]) for e in denied
    ] == [("left_click", True)]
    actions = [e for e in events if e["kind"] == "action"]
    assert [(a["type"], a["native"]) for a in actions] == [
        ("left_click", {"x": 1000, "y": 600}),  # 640x400 view of the 1280x800 screen
        ("key", None),
    ]
    assert actions[1]["keys"] == ["Control_L", "a"]
    turns_recorded = [e for e in events if e["kind"] == "model_turn"]
    assert [[c["name"] for c in e["calls"]] for e in turns_recorded] == [
        ["screenshot", "left_click"],
        ["left_click", "key", "screenshot"],
        [],
    ]
    assert turns_recorded[-1]["message"] == "done"
    shots = [e for e in events if e["kind"] == "screenshot"]
    assert len(shots) == 2 and all(s["size"] == [640, 400] for s in shots)
    assert result.usage["requests"] == 3 and result.usage["input_tokens"] == 3


def test_a_claude_run_clicking_at_nothing_stalls(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    dead = ("left_click", {"coordinate": [5, 5]})
    turns: list[MessagesTurn] = [[dead], [dead], [dead], [dead], "done"]
    spec = RunSpec(out=tmp_path / "out", loop="tool_runner", prompt="go", stall_limit=2)
    with ScriptedMessages(turns) as stand_in:
        model = AnthropicModel("claude-test", api_key="k", base_url=stand_in.base_url)
        result = run(local_desktop, spec, model)
    assert result.stalled is not None and "2 state-changing actions" in result.stalled
    assert not result.ok
    events = read_trajectory(tmp_path / "out")
    assert any(e["kind"] == "warning" and e["what"] == "stall" for e in events)
    assert any(e["kind"] == "cancel" for e in events)


def test_a_gemini_run_maps_the_grid_and_asks_the_safety_policy_to_confirm(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    risky = {"decision": "require_confirmation", "explanation": "it buys something"}
    turns: list[GeminiTurn] = [
        [("click_at", {"x": 500, "y": 500}), ("key_combination", {"keys": "Control+a"})],
        [("click_at", {"x": 10, "y": 10, "safety_decision": risky}, "error")],
        "done",
    ]
    spec = RunSpec(
        out=tmp_path / "out",
        loop="generate_content",
        prompt="go",
        max_steps=5,
        safety_policy=NonInteractive("no terminal in tests"),
    )
    with ScriptedGemini(turns) as stand_in:
        model = GeminiModel("gemini-test", api_key="k", base_url=stand_in.base_url)
        result = run(local_desktop, spec, model)
    assert result.ok, result.error
    assert (result.provider, result.final_message) == ("gemini", "done")
    events = read_trajectory(tmp_path / "out")
    actions = [e for e in events if e["kind"] == "action"]
    assert [(a["type"], a["native"]) for a in actions] == [
        ("click_at", {"x": 640, "y": 400}),
        ("key_combination", None),
    ]
    (check,) = [e for e in events if e["kind"] == "approval" and e["subject"] == "safety_check"]
    assert (check["allowed"], check["detail"]) == (False, "require_confirmation")
    assert check["checks"][0]["message"] == "it buys something"
    first = stand_in.requests[0]["contents"][0]["parts"]
    assert first[0]["text"] == "go"
    blob = first[1].get("inlineData") or first[1].get("inline_data")  # either spelling
    assert (blob.get("mimeType") or blob.get("mime_type")) == "image/png", "the screen as it starts"
    run_record = next(e for e in events if e["kind"] == "run")
    assert (run_record["provider"], run_record["loop"]) == ("gemini", "generate_content")
    assert [e["kind"] for e in events].count("model_turn") == 3
