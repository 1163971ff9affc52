"""The OpenAI Agents SDK's real ``Runner`` drives a cubicle desktop through our computers.

Each test runs an ``Agent`` with ``ComputerTool`` (:mod:`cubicle.drivers.agents_computer`) against
the scripted model through ``OpenAIResponsesModel`` and our ``AsyncOpenAI`` client, on the local
desktop (Xvfb + openbox + agent, mousepad): the model types a note and saves it through the Save
As dialog, one safety check is approved by our policy, and a later call whose safety check the
policy denies stops the run before its actions (which would have overwritten the note). The
saved file's bytes, the trajectory and report.html (:mod:`cubicle.orchestrator.agents_run`) are
checked.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, ComputerTool, ModelSettings, OpenAIResponsesModel, RunConfig, Runner
from agents.exceptions import UserError
from PIL import Image, ImageChops

from cubicle.drivers import AsyncGuestDriver, FilePolicy, GuestDriver, NonInteractive, Viewport
from cubicle.drivers.agents_computer import ActionDenied, AsyncCubicleComputer, CubicleComputer
from cubicle.drivers.errors import ActionRejected, CoordinateOutOfView
from cubicle.drivers.policy_file import parse_policy
from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.agents_run import AgentsRunRecording
from cubicle.orchestrator.trajectory import read_trajectory
from tests.drill.desktop import LocalDesktop, app, wait_for_window

pytestmark = pytest.mark.slow

POLICY = """
version = 1
default = "allow"
safety_checks = "deny"

[[rule]]
decision = "deny"
actions = ["type"]
text = "(?i)password"
note = "never type a password"

[[check]]
decision = "allow"
codes = ["irrelevant_domain"]
note = "the note app is expected here"
"""
TEXT = "Agents SDK ✓ — naïve 日本語\nsecond line\n"
NO_TRACING = RunConfig(tracing_disabled=True)
VIEW = Viewport.fit(1024, 640)  # the desktop is 1280x800: every coordinate is scaled


def _script(note: Path) -> dict[str, Any]:
    approved = {"id": "sc_ok", "code": "irrelevant_domain", "message": "typing into an editor"}
    denied = {"id": "sc_no", "code": "malicious_instructions", "message": "overwrite the note"}
    return {
        "name": "agents-sdk",
        "model_view": {"width": 1024, "height": 640},
        "turns": [
            {
                "computer_call": {
                    "actions": [
                        # a held modifier reaches the driver (the SDK passes keys=)
                        {"type": "move", "x": 512, "y": 320, "keys": ["shift"]},
                        {"type": "type", "text": TEXT},
                    ],
                    "pending_safety_checks": [approved],
                }
            },
            {"computer_call": {"action": {"type": "keypress", "keys": ["ctrl", "s"]}}},
            {
                "computer_call": {
                    "actions": [
                        {"type": "keypress", "keys": ["CTRL", "A"]},
                        {"type": "type", "text": str(note)},
                        {"type": "keypress", "keys": ["Return"]},
                    ]
                }
            },
            {
                "computer_call": {
                    "actions": [
                        {"type": "type", "text": "OVERWRITTEN"},
                        {"type": "keypress", "keys": ["CTRL", "S"]},
                    ],
                    "pending_safety_checks": [denied],
                }
            },
            {"message": "never reached: the denied call stops the run"},
        ],
    }


def _agent(
    computer: Any, on_safety_check: Any, model: ScriptedModel, rec: AgentsRunRecording
) -> Any:
    client = rec.openai_client(base_url=model.base_url, api_key="offline")
    tool = ComputerTool(computer=computer, on_safety_check=on_safety_check)
    return Agent(
        name="desk",
        instructions="Use the computer.",
        model=OpenAIResponsesModel("scripted", client),
        tools=[tool],
    )


def _check_outcome(note: Path, out: Path, model: ScriptedModel, *, streamed: bool = False) -> None:
    # the approved call ran and the note was saved; the denied call's actions never ran
    assert note.read_bytes() == TEXT.encode()
    assert model.turns_served == 4 and model.failures == []
    # the screenshot answering the first call was taken at the model's view size
    requests = model.requests
    assert requests[0]["tools"] == [{"type": "computer"}]
    acknowledged = requests[1]["input"][-1]["acknowledged_safety_checks"]
    assert [a["id"] for a in acknowledged] == ["sc_ok"]

    events = read_trajectory(out)
    (run,) = [e for e in events if e["kind"] == "run"]
    assert run["loop"] == "agents" and run["model_view"] == [1024, 640]
    checks = [
        (e["allowed"], e["detail"], e["by"])
        for e in events
        if e["kind"] == "approval" and e["subject"] == "safety_check"
    ]
    assert [(allowed, detail) for allowed, detail, _ in checks] == [
        (True, "irrelevant_domain"),
        (False, "malicious_instructions"),
    ]
    assert "check 1" in checks[0][2]
    actions = [e for e in events if e["kind"] == "action"]
    kinds = [a["type"] for a in actions]
    assert kinds == ["move", "type", "keypress", "keypress", "type", "keypress"]
    assert actions[0]["keys"] == ["shift"] and actions[0]["native"] == {"x": 640, "y": 400}
    assert actions[1]["text"] == TEXT and actions[2]["keys"] == ["ctrl", "s"]
    assert all(a["outcome"] == "done" and a["receipt"]["settled"] for a in actions)
    assert actions[1]["receipt"]["changed"] is True
    turns = [e for e in events if e["kind"] == "model_turn"]
    assert len(turns) == 4
    if not streamed:  # a streamed turn's body is the SDK's: only its status is recorded
        assert turns[-1]["calls"][0]["pending_safety_checks"][0]["id"] == "sc_no"
    assert [r.get("stream", False) for r in model.requests] == [streamed] * 4
    shots = [e for e in events if e["kind"] == "screenshot"]
    assert len(shots) == 4  # before the run, then one per executed call
    first, typed = (Image.open(out / s["file"]).convert("RGB") for s in shots[:2])
    assert first.size == typed.size == (1024, 640)
    box = ImageChops.difference(first, typed).getbbox()
    assert box is not None, "the typed text is not in the screenshot the model received"
    (end,) = [e for e in events if e["kind"] == "end"]
    assert end["ok"] is False and "not acknowledged" in end["error"]
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "malicious_instructions" in report and "shots/0001.png" in report


@pytest.fixture
def sync_runner_loop() -> Iterator[None]:
    """``Runner.run_sync`` leaves this thread's default event loop open on purpose: close it."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.get_event_loop_policy().get_event_loop()
    loop.close()
    asyncio.set_event_loop(None)


@pytest.mark.x11
@pytest.mark.usefixtures("sync_runner_loop")
def test_runner_run_sync_saves_a_note_with_one_check_approved_and_one_denied(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    note = tmp_path / "agents note.txt"
    out = tmp_path / "out"
    policy = FilePolicy(parse_policy(POLICY))

    def run(model: ScriptedModel) -> None:
        with (
            AgentsRunRecording(
                out,
                task="save a note",
                model="scripted",
                safety_policy=policy,
                action_policy=policy,
            ) as rec,
            local_desktop.connect() as client,
            GuestDriver(client, viewport=VIEW, on_action=rec.on_action) as driver,
            CubicleComputer(driver, before_action=rec.before_action) as computer,
        ):
            agent = _agent(computer, rec.on_safety_check, model, rec)
            rec.begin(driver)
            result = Runner.run_sync(agent, "save a note", run_config=NO_TRACING)
            rec.finish(result.final_output)

    with (
        app(local_desktop, "mousepad"),
        ScriptedModel(parse_script(_script(note))) as model,
    ):
        wait_for_window(local_desktop, "Mousepad")
        with pytest.raises(UserError, match="not acknowledged"):
            run(model)
    _check_outcome(note, out, model)
    assert [d.approved for d in policy.log if d.subject == "safety_checks"] == [True, False]


@pytest.mark.x11
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_runner_run_async_saves_a_note_with_one_check_approved_and_one_denied(
    local_desktop: LocalDesktop, tmp_path: Path, streamed: bool
) -> None:
    note = tmp_path / "agents async note.txt"
    out = tmp_path / "out"
    policy = FilePolicy(parse_policy(POLICY))
    assert local_desktop.agent is not None
    socket_path = local_desktop.agent.socket_path

    async def main(model: ScriptedModel) -> None:
        async with (
            AgentsRunRecording(
                out, task="save a note", model="scripted", safety_policy=policy
            ) as rec,
            await AsyncGuestDriver.connect(
                socket_path, viewport=VIEW, on_action=rec.on_action
            ) as driver,
            AsyncCubicleComputer(driver, before_action=rec.before_action) as computer,
        ):
            agent = _agent(computer, rec.async_on_safety_check, model, rec)
            await rec.abegin(driver)
            if streamed:
                streaming = Runner.run_streamed(agent, "save a note", run_config=NO_TRACING)
                async for _ in streaming.stream_events():
                    pass
                rec.finish(streaming.final_output)
            else:
                result = await Runner.run(agent, "save a note", run_config=NO_TRACING)
                rec.finish(result.final_output)

    with (
        app(local_desktop, "mousepad"),
        ScriptedModel(parse_script(_script(note))) as model,
    ):
        wait_for_window(local_desktop, "Mousepad")
        with pytest.raises(UserError, match="not acknowledged"):
            anyio.run(main, model)
    _check_outcome(note, out, model, streamed=streamed)


PREVIEW_TOOL = {
    "type": "computer_use_preview",
    "environment": "ubuntu",
    "display_width": 1024,
    "display_height": 640,
}


@pytest.mark.x11
@pytest.mark.parametrize(
    ("action", "error", "asked"),
    [
        ({"type": "type", "text": "my Password is hunter2"}, ActionDenied, True),
        ({"type": "click", "button": "left", "x": 1024, "y": 10}, CoordinateOutOfView, False),
        ({"type": "keypress", "keys": ["CTRL", "Hyperdrive"]}, ActionRejected, False),
    ],
    ids=["denied-by-policy", "outside-the-view", "unknown-key"],
)
def test_the_preview_tool_and_what_our_computer_refuses_before_sending(
    local_desktop: LocalDesktop,
    tmp_path: Path,
    action: dict[str, Any],
    error: type[Exception],
    asked: bool,
) -> None:
    """A ``computer-use-preview`` model gets the preview tool with our view's size; legacy
    single actions run; refused actions stop the run and reach the guest never."""
    script = {
        "name": "preview",
        "model_view": {"width": 1024, "height": 640},
        "turns": [
            {"computer_call": {"action": {"type": "move", "x": 1023, "y": 639}}},
            {"computer_call": {"action": action}},
            {"message": "never reached"},
        ],
    }
    policy = FilePolicy(parse_policy(POLICY))

    async def main(model: ScriptedModel) -> None:
        assert local_desktop.agent is not None
        async with (
            AgentsRunRecording(
                tmp_path / "out",
                task="t",
                model="computer-use-preview",
                safety_policy=policy,
                action_policy=policy,
            ) as rec,
            await AsyncGuestDriver.connect(
                local_desktop.agent.socket_path, viewport=VIEW, on_action=rec.on_action
            ) as driver,
            AsyncCubicleComputer(driver, before_action=rec.before_action) as computer,
        ):
            client = rec.openai_client(base_url=model.base_url, api_key="offline")
            agent = Agent(
                name="desk",
                model=OpenAIResponsesModel("computer-use-preview", client),
                model_settings=ModelSettings(truncation="auto"),
                tools=[ComputerTool(computer=computer, on_safety_check=rec.async_on_safety_check)],
            )
            await Runner.run(agent, "go", run_config=NO_TRACING)

    with ScriptedModel(parse_script(script)) as model, pytest.raises(error):
        anyio.run(main, model)
    assert model.failures == [] and model.turns_served == 2
    assert all(request["tools"] == [PREVIEW_TOOL] for request in model.requests)
    assert model.requests[0]["truncation"] == "auto"
    events = read_trajectory(tmp_path / "out")
    actions = [(e["type"], e["outcome"], e.get("native")) for e in events if e["kind"] == "action"]
    refused = [] if asked else [(action["type"], "rejected", None)]
    assert actions == [("move", "done", {"x": 1279, "y": 799}), *refused]
    decisions = [(d.action, d.approved) for d in policy.log if d.subject == "action"]
    assert decisions == [("move", True), *([(action["type"], False)] if asked else [])]


@pytest.mark.docker
def test_the_example_runs_offline_on_a_docker_sandbox_and_leaves_nothing_behind(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    example = Path(__file__).resolve().parents[2] / "examples" / "agents_sdk.py"
    process = subprocess.Popen(
        [sys.executable, str(example), "--out", str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr[-3000:]
    lines = stdout.splitlines()
    assert lines[0] == "Done."
    assert "safety_checks None True ()" in lines
    # the model's (512, 320) in its 1024x640 view was clicked at screen (640, 400)
    assert "action click True ((640, 400),)" in lines
    events = read_trajectory(out)
    actions = [(e["type"], e["native"], e["outcome"]) for e in events if e["kind"] == "action"]
    assert actions == [
        ("move", {"x": 640, "y": 400}, "done"),
        ("click", {"x": 640, "y": 400}, "done"),
        ("keypress", None, "done"),
    ]
    (end,) = [e for e in events if e["kind"] == "end"]
    assert end["ok"] is True and end["final_message"] == "Done."
    assert (out / "report.html").is_file()
    assert cubicle_containers(process.pid) == []


@pytest.mark.x11
@pytest.mark.usefixtures("sync_runner_loop")
def test_a_stalled_agent_is_stopped_and_the_stall_recorded(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    inert = {"type": "click", "button": "left", "x": 16, "y": 560}  # the empty desktop
    script = parse_script(
        {
            "name": "stall",
            "turns": [{"computer_call": {"actions": [inert, inert]}} for _ in range(4)]
            + [{"message": "never reached"}],
        }
    )
    out = tmp_path / "out"
    with ScriptedModel(script, raise_on_exit=False) as model, pytest.raises(ActionDenied):  # noqa: SIM117
        with (
            AgentsRunRecording(
                out, task="t", model="scripted", safety_policy=NonInteractive(), stall_limit=3
            ) as rec,
            local_desktop.connect() as client,
            GuestDriver(client, viewport=VIEW, on_action=rec.on_action) as driver,
            CubicleComputer(driver, before_action=rec.before_action) as computer,
        ):
            rec.begin(driver)
            Runner.run_sync(
                _agent(computer, rec.on_safety_check, model, rec), "t", run_config=NO_TRACING
            )
    events = read_trajectory(out)
    assert [e["what"] for e in events if e["kind"] == "warning"] == ["stall"]
    actions = [e for e in events if e["kind"] == "action"]
    assert len(actions) == 3, "the agent went on acting after the stall"
    assert all(a["receipt"]["changed"] is False for a in actions)
    (end,) = [e for e in events if e["kind"] == "end"]
    assert end["ok"] is False and end["error"].startswith("stalled: 3 state-changing actions")
    assert "ActionDenied" in end["error"]
