"""The drill in a Docker sandbox: ``cubicle drill`` end to end, a wrong-text script, a refused
safety check, and Ctrl-C mid-run."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from drivers.approvals import NonInteractive
from orchestrator.drill.runner import run_drill
from orchestrator.drill.task import EXPECTED_NOTE, script_template
from orchestrator.sandbox import Sandbox
from orchestrator.trajectory import read_trajectory
from tests.drill.conftest import PYTHON, REPO
from tests.drill.test_trajectory_report import render_in_chromium

pytestmark = [pytest.mark.docker, pytest.mark.slow]

GUEST_HOME = "/home/cubicle"


def _drill_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", "orchestrator.cli", "drill", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_cubicle_drill_passes_with_both_loops_and_its_reports_render(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    process = _drill_cli("--out", str(tmp_path / "runs"))
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, f"{stdout}\n{stderr}"
    assert "drill (toolset): PASSED" in stdout and "drill (runner): PASSED" in stdout
    assert stdout.count("stale model-visible screenshots: 0 of 5 checked") == 2, stdout
    assert cubicle_containers(process.pid) == []
    for loop in ("toolset", "runner"):
        folder = tmp_path / "runs" / loop
        events = read_trajectory(folder)
        shots = [e for e in events if e["kind"] == "screenshot"]
        assert len(shots) >= 8 and all(s["size"] == [1024, 640] for s in shots)
        receipts = [e["receipt"] for e in events if e["kind"] == "action"]
        assert len(receipts) == 11 and all(r["settled"] for r in receipts)
        dom = render_in_chromium(folder / "report.html", tmp_path / f"profile-{loop}")
        assert len(re.findall(r'<section class="step"', dom)) == len(shots)
        assert all(f'src="{s["file"]}"' in dom for s in shots)
        assert "mark-click" in dom


def test_a_script_typing_the_wrong_text_fails_verification_with_expected_vs_got(
    drill_sandbox: Sandbox, tmp_path: Path
) -> None:
    template = script_template()
    wrong = EXPECTED_NOTE.replace("Grêmio", "Gremio")
    for turn in template["turns"]:
        for action in (turn.get("computer_call") or {}).get("actions", []):
            if action.get("text") == EXPECTED_NOTE:
                action["text"] = wrong
    result = run_drill(
        drill_sandbox,
        loop="toolset",
        out=tmp_path / "out",
        workdir=f"{GUEST_HOME}/drill-wrong-text",
        port=8801,
        script_template=template,
    )
    assert not result.ok
    note, form, stale = result.checks
    assert stale.ok, "typing other text does not make the screenshots stale"
    assert not note.ok and note.got == wrong and note.expected == EXPECTED_NOTE
    assert form.ok, "only the note was typed wrong"
    summary = result.summary()
    assert "FAILED  note saved through the editor" in summary
    assert 'expected: "Grêmio' in summary and 'got:      "Gremio' in summary
    assert "first difference at character 2" in summary


def test_a_refused_safety_check_stops_the_run_before_any_of_its_actions(
    drill_sandbox: Sandbox, tmp_path: Path
) -> None:
    result = run_drill(
        drill_sandbox,
        loop="toolset",
        out=tmp_path / "out",
        workdir=f"{GUEST_HOME}/drill-refused",
        port=8802,
        safety_policy=NonInteractive("the test refuses every safety check"),
    )
    assert not result.ok
    assert result.error is not None and "approval" in result.error
    note, form, _stale = result.checks
    assert note.ok, "the steps before the safety check ran"
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
    process = _drill_cli("--loop", "toolset", "--out", str(out))
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
