"""The pixels-only drill in Docker sandboxes: ``cubicle drill --all --loop toolset`` end to end
(every shipped task on the SDK's ``ComputerToolset`` loop, the conformance table; the ``runner``
loop plays every shipped task in tests/eval's oracle test, and ``make conformance`` runs both
loops of every provider), a wrong expectation, a wrong text, a refused safety check, and Ctrl-C
mid-run."""

from __future__ import annotations

import copy
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cubicle.drivers.approvals import NonInteractive
from cubicle.orchestrator.drill.runner import DrillResult, run_drill
from cubicle.orchestrator.modelrun.loop import LoopKind
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.tasks import load_task, shipped_tasks
from cubicle.orchestrator.trajectory import read_trajectory
from tests.drill.conftest import PYTHON, REPO
from tests.drill.pixels_only import assert_pixels_only_play
from tests.drill.test_trajectory_report import render_in_chromium

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _drill_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", "cubicle.orchestrator.cli", "drill", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_drill_all_passes_every_shipped_task_on_the_toolset_loop_pixels_only(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    process = _drill_cli("--all", "--loop", "toolset", "--out", str(tmp_path / "runs"))
    stdout, stderr = process.communicate(timeout=1200)
    assert process.returncode == 0, f"{stdout}\n{stderr}"
    assert cubicle_containers(process.pid) == []
    table = stdout[stdout.index("task ") :]
    assert re.match(r"task +provider +loop +verdict +steps +seconds +stale\n", table), table
    drilled = [t for t in shipped_tasks() if t.scripted is None or not t.scripted.tools]
    assert len(drilled) < len(shipped_tasks()), "ask-user needs a user: cubicle serve's"
    assert len(re.findall(r"^\S+ +openai +", table, re.MULTILINE)) == len(drilled), table
    for task in drilled:
        row = re.search(
            rf"^{re.escape(task.name)} +openai +toolset +(\S+) +(\d+) +\S+ +(\d+)/(\d+)$",
            table,
            re.MULTILINE,
        )
        assert row is not None, (task.name, table)
        assert row.group(1) == "PASSED" and int(row.group(2)) > 0
        assert row.group(3) == "0" and int(row.group(4)) > 0, "no stale screenshot"
        assert_pixels_only_play(read_trajectory(tmp_path / "runs" / task.name / "toolset"), task)
    folder = tmp_path / "runs" / "desktop" / "toolset"
    events = read_trajectory(folder)
    launcher_clicks = [
        e
        for e in events
        if e["kind"] == "action" and e["type"] == "click" and e["native"]["y"] == 780
    ]
    assert len(launcher_clicks) == 2, "the editor and the browser are opened from the panel"
    assert all(c["receipt"]["settled"] and c["receipt"]["changed"] for c in launcher_clicks)
    dom = render_in_chromium(folder / "report.html", tmp_path / "profile")
    shots = [e for e in events if e["kind"] == "screenshot"]
    assert len(re.findall(r'<section class="step"', dom)) == len(shots)
    expectations = [e for e in events if e["kind"] == "expectation"]
    assert dom.count('<li class="ok">seen: ') == len(expectations) > 0


@pytest.mark.parametrize(
    ("provider", "loop", "launcher_click"),
    [("anthropic", "tool_runner", "left_click"), ("gemini", "generate_content", "click_at")],
)
def test_the_drill_passes_through_each_providers_real_client_with_no_flag_but_the_provider(
    docker_image: str,
    tmp_path: Path,
    cubicle_containers: Callable[[int], list[str]],
    provider: str,
    loop: str,
    launcher_click: str,
) -> None:
    """``cubicle drill --provider P --task desktop``: every loop P has, through the real
    anthropic / google-genai client at the stand-in; the file's bytes and the form's data are
    verified, no model-visible screenshot was stale, the same trajectory as OpenAI's."""
    process = _drill_cli("--provider", provider, "--task", "desktop", "--out", str(tmp_path))
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, f"{stdout}\n{stderr}"
    assert cubicle_containers(process.pid) == []
    assert f"drill desktop ({loop}): PASSED" in stdout
    assert "  ok      note saved through the editor" in stdout
    assert "  ok      form submitted in the browser" in stdout
    assert re.search(r"stale model-visible screenshots: 0 of [1-9]\d* checked", stdout), stdout
    assert f"drill PASSED on docker ({provider}): 1 of 1 runs" in stdout
    assert re.search(rf"^desktop +{provider} +{loop} +PASSED +\d+ +\S+ +0/\d+$", stdout, re.M)
    events = read_trajectory(tmp_path / loop)
    run = next(e for e in events if e["kind"] == "run")
    assert (run["provider"], run["loop"]) == (provider, loop)
    turns = [e for e in events if e["kind"] == "model_turn"]
    assert len(turns) >= 9 and all(t["status"] != "http 400" for t in turns)
    assert turns[-1]["message"] == "Done: the note is saved and the form is submitted."
    launcher_clicks = [
        e
        for e in events
        if e["kind"] == "action" and e["type"] == launcher_click and e["native"]["y"] == 780
    ]
    assert len(launcher_clicks) == 2, "the editor and the browser are opened from the panel"
    assert all(c["receipt"]["settled"] and c["receipt"]["changed"] for c in launcher_clicks)
    typed = [e["text"] for e in events if e["kind"] == "action" and "text" in e]
    assert "Zoë Ångström-Łukasiewicz" in typed
    seen = [e for e in events if e["kind"] == "expectation"]
    assert len(seen) >= 8 and all(e["ok"] for e in seen)
    end = next(e for e in events if e["kind"] == "end")
    assert end["ok"] and end["usage"]["requests"] == len(turns)


def _drill_edited(
    sandbox: Sandbox, out: Path, loop: LoopKind, edit: Callable[[dict[str, Any]], None]
) -> DrillResult:
    """``editor-save`` with its script changed by ``edit``."""
    task = load_task("editor-save")
    script = copy.deepcopy(task.script())
    edit(script)
    return run_drill(sandbox, task=task, loop=loop, out=out, script_template=script)


def test_a_wrong_expectation_fails_the_drill_and_names_it(
    fresh_sandbox: Sandbox, tmp_path: Path
) -> None:
    def expect_another_dialog(script: dict[str, Any]) -> None:
        # the Open dialog ("Open File") is what the screen shows there
        script["turns"][3]["sees"] = [{"window": {"title": "Save As", "focused": True}}]

    result = _drill_edited(fresh_sandbox, tmp_path / "out", "toolset", expect_another_dialog)
    assert not result.ok
    assert result.error is not None
    assert "turn 3, sees[0]: expected a window titled like 'Save As', focused; windows seen:" in (
        result.error
    ), result.error
    assert "'Open File' (focused)" in result.error
    assert "ExpectationFailed" in result.error
    events = read_trajectory(tmp_path / "out")
    failed = [e for e in events if e["kind"] == "expectation" and not e["ok"]]
    assert len(failed) == 1 and failed[0]["turn"] == 3
    # the actions of the turn whose expectation failed never ran
    assert not any(e["kind"] == "action" and e.get("keys") == ["CTRL", "L"] for e in events)


def test_a_script_typing_the_wrong_text_fails_verification_with_expected_vs_got(
    fresh_sandbox: Sandbox, tmp_path: Path
) -> None:
    def misspell(script: dict[str, Any]) -> None:
        for turn in script["turns"]:
            for action in (turn.get("computer_call") or {}).get("actions", []):
                if action.get("text") == "bread\n":
                    action["text"] = "bred\n"

    result = _drill_edited(fresh_sandbox, tmp_path / "out", "runner", misspell)
    assert not result.ok and result.error is None, result.summary()
    saved, stale = result.checks
    assert stale.ok, "typing other text does not make the screenshots stale"
    assert not saved.ok and saved.got == "milk\neggs\nbred\n"
    summary = result.summary()
    assert "FAILED  the line added and saved" in summary
    assert "first difference at character 13" in summary


def test_a_refused_safety_check_stops_the_run_before_any_of_its_actions(
    fresh_sandbox: Sandbox, tmp_path: Path
) -> None:
    result = run_drill(
        fresh_sandbox,
        task=load_task("browser-form"),
        loop="toolset",
        out=tmp_path / "out",
        safety_policy=NonInteractive("the test refuses every safety check"),
    )
    assert not result.ok
    assert result.error is not None and "approval" in result.error
    form, _stale = result.checks
    assert not form.ok and form.got is None, "the Save click behind the check never ran"
    events = read_trajectory(tmp_path / "out")
    refusal = next(i for i, e in enumerate(events) if e["kind"] == "approval")
    assert events[refusal]["allowed"] is False
    assert events[refusal]["reason"] == "the test refuses every safety check"
    assert [e for e in events[refusal:] if e["kind"] == "action"] == []


def test_sigint_mid_run_cancels_and_leaves_no_sandbox(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    out = tmp_path / "runs"
    process = _drill_cli("--task", "desktop", "--loop", "toolset", "--out", str(out))
    trajectory = out / "toolset" / "trajectory.jsonl"
    deadline = time.monotonic() + 120
    stdout = stderr = ""
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if trajectory.is_file() and '"kind": "model_turn"' in trajectory.read_text("utf-8"):
                break
            time.sleep(0.1)
        assert process.poll() is None, "the drill ended before it could be interrupted"
        assert cubicle_containers(process.pid), "the drill's sandbox should exist mid-run"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.returncode is None:  # communicate() did not finish: stop it, close the pipes
            process.kill()
            process.communicate(timeout=60)
    assert process.returncode == 130, f"{stdout}\n{stderr}"
    assert "cancelling" in stderr and "CANCELLED" in stdout
    assert cubicle_containers(process.pid) == []
