"""Resuming an interrupted run on the same desktop (issue 45), with the real ``cubicle drill``
process killed by SIGKILL: ``gc`` spares the resumable sandbox, ``cubicle drill --resume DIR``
finishes the task on the same sandbox id, the guest's input log shows every scripted action
performed exactly once, and the trajectory is one run with the interruption marked. Also: Ctrl-C
still leaves no sandbox, a kill before the first completed turn leaves nothing to ``gc``, and
after its window ``gc`` removes a resumable sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cubicle.orchestrator.drill.runner import input_log
from cubicle.orchestrator.providers import get_provider
from cubicle.orchestrator.resume_marks import DIR_ENV
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.tasks import load_task
from cubicle.orchestrator.trajectory import read_trajectory
from cubicle_guest.input_log import INPUT_OPS
from tests.support.cli import run_cli, start_cli
from tests.support.processes import communicate_or_kill

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def marks(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment whose resume marks live in this test's own folder; every sandbox a
    drill of the test left is removed afterwards."""
    env = {**os.environ, DIR_ENV: str(tmp_path / "marks")}
    yield env
    for resume in tmp_path.glob("**/resume.json"):
        sandbox_id = json.loads(resume.read_text())["sandbox"]
        get_provider("docker").destroy(sandbox_id)


def _cubicle(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return start_cli(*args, env=env)


def _drill(env: dict[str, str], out: Path, *options: str) -> subprocess.Popen[str]:
    """``cubicle drill --task desktop --loop runner OPTIONS --out OUT`` started."""
    drill = ("drill", "--task", "desktop", "--loop", "runner")
    return _cubicle(env, *drill, *options, "--out", str(out))


def _drill_until(
    env: dict[str, str], out: Path, reached: Callable[[list[dict[str, Any]]], bool]
) -> subprocess.Popen[str]:
    """Start ``cubicle drill --loop runner --out OUT``; return once its trajectory (or its
    resume file, when there is no trajectory yet) satisfies ``reached``, the process still
    running."""
    process = _drill(env, out)
    folder = out / "runner"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        events = read_trajectory(folder) if (folder / "trajectory.jsonl").exists() else []
        if (folder / "resume.json").exists() and reached(events):
            return process
        time.sleep(0.05)
    stdout, stderr = communicate_or_kill(process, 60)
    raise AssertionError(f"the drill ended before the kill point:\n{stdout}\n{stderr}")


def _kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    communicate_or_kill(process, 60)
    assert process.returncode == -signal.SIGKILL


def _sandbox_of(out: Path) -> str:
    return str(json.loads((out / "runner" / "resume.json").read_text())["sandbox"])


def _gc(env: dict[str, str]) -> list[str]:
    done = run_cli("gc", timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _actions(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if e["kind"] == "action")


def _scripted_input() -> list[tuple[str, dict[str, Any]]]:
    """Every input action of the desktop task's script, in order: (type, action)."""
    script = load_task("desktop").script()
    return [
        (action["type"], action)
        for turn in script["turns"]
        for action in (turn.get("computer_call") or {}).get("actions") or []
        if action["type"] in INPUT_OPS
    ]


@pytest.mark.parametrize(
    "actions_done",
    [4, 12],  # two kill points in make test (after-turn-5 and later ones: by hand or in a bench)
    ids=["after-turn-3", "mid-batch-of-turn-7"],
)
def test_kill_9_then_resume_finishes_on_the_same_sandbox_with_no_action_twice(
    docker_image: str, tmp_path: Path, marks: dict[str, str], actions_done: int
) -> None:
    out = tmp_path / "drill"
    process = _drill_until(marks, out, lambda events: _actions(events) >= actions_done)
    _kill(process)
    sandbox_id = _sandbox_of(out)
    assert sandbox_id not in _gc(marks), "a resumable sandbox is spared by gc"
    assert get_provider("docker").describe(sandbox_id) is not None
    assert os.stat(out / "runner" / "ledger.json").st_mode & 0o777 == 0o600

    resumed = _cubicle(marks, "drill", "--resume", str(out), "--keep")
    stdout, stderr = communicate_or_kill(resumed)
    assert resumed.returncode == 0, f"{stdout}\n{stderr}"
    assert "drill PASSED" in stdout and f"resumed on {sandbox_id}" in stdout

    with Sandbox.attach(sandbox_id) as sandbox:
        client = sandbox.connect()
        try:
            performed = [(entry["op"], entry["args"]) for entry in input_log(client)]
        finally:
            client.close()
    scripted = _scripted_input()
    assert [op for op, _ in performed] == [kind for kind, _ in scripted], "each action once"
    typed = [args["text"] for op, args in performed if op == "type"]
    assert len(typed) == len(set(typed)), f"a text was typed twice: {typed}"

    events = read_trajectory(out / "runner")
    kinds = [e["kind"] for e in events]
    assert kinds.count("run") == 1 and kinds.count("resume") == 1 and kinds.count("end") == 1
    assert kinds.index("run") < kinds.index("resume") < kinds.index("end")
    run = next(e for e in events if e["kind"] == "run")
    resume = next(e for e in events if e["kind"] == "resume")
    assert run["sandbox"] == resume["sandbox"] == sandbox_id
    assert resume["completed_turns"] >= 1 and resume["remaining_steps"] >= 1
    settle = next(
        e for e in events if e["kind"] == "screenshot" and e["index"] == resume["settle_shot"]
    )
    assert settle["note"] == "settle: after resume"
    assert next(e for e in events if e["kind"] == "end")["ok"] is True
    # the trajectory records an action once it returned: the one in flight at the kill (its
    # input in the guest's log) may have no record
    assert len(scripted) - 1 <= _actions(events) <= len(scripted)


def test_ctrl_c_after_a_completed_turn_still_leaves_no_sandbox(
    docker_image: str, tmp_path: Path, marks: dict[str, str]
) -> None:
    out = tmp_path / "drill"
    process = _drill_until(marks, out, lambda events: _actions(events) >= 1)
    sandbox_id = _sandbox_of(out)
    process.send_signal(signal.SIGINT)
    stdout, stderr = communicate_or_kill(process)
    assert process.returncode == 130, f"{stdout}\n{stderr}"
    assert get_provider("docker").describe(sandbox_id) is None
    assert not (tmp_path / "marks" / f"{sandbox_id}.json").exists()
    refused = _cubicle(marks, "drill", "--resume", str(out))
    _, stderr = communicate_or_kill(refused)
    assert refused.returncode != 0 and sandbox_id in stderr and "gone" in stderr


def test_kill_9_before_the_first_completed_turn_leaves_nothing_after_gc(
    docker_image: str, tmp_path: Path, marks: dict[str, str]
) -> None:
    out = tmp_path / "drill"
    process = _drill_until(marks, out, lambda events: True)  # as soon as the sandbox exists
    _kill(process)
    sandbox_id = _sandbox_of(out)
    assert sandbox_id in _gc(marks)
    assert get_provider("docker").describe(sandbox_id) is None


def test_after_its_window_gc_removes_a_resumable_sandbox_and_resume_says_what_is_lost(
    docker_image: str, tmp_path: Path, marks: dict[str, str]
) -> None:
    out = tmp_path / "drill"
    window = 15.0
    process = _drill(marks, out, "--resume-window", f"{window:.0f}s")
    mark = tmp_path / "marks"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and not any(mark.glob("*.json")):
        time.sleep(0.05)
    _kill(process)
    sandbox_id = _sandbox_of(out)
    assert sandbox_id not in _gc(marks), "within its window"
    ends = json.loads((mark / f"{sandbox_id}.json").read_text())["deadline"]
    while time.time() <= ends:  # the window passes
        time.sleep(0.2)
    assert sandbox_id in _gc(marks)
    assert get_provider("docker").describe(sandbox_id) is None
    refused = _cubicle(marks, "drill", "--resume", str(out))
    _, stderr = communicate_or_kill(refused)
    assert refused.returncode != 0, stderr
    assert f"sandbox {sandbox_id} is gone" in stderr and "completed turns" in stderr


def test_ctrl_c_with_keep_for_resume_keeps_the_sandbox_and_resume_finishes(
    docker_image: str, tmp_path: Path, marks: dict[str, str]
) -> None:
    out = tmp_path / "drill"
    process = _drill(marks, out, "--keep-for-resume")
    folder = out / "runner"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        events = read_trajectory(folder) if (folder / "trajectory.jsonl").exists() else []
        if _actions(events) >= 4:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = communicate_or_kill(process)
    assert process.returncode == 130, f"{stdout}\n{stderr}"
    assert f"continue with: cubicle drill --resume {out}" in stderr
    sandbox_id = _sandbox_of(out)
    assert get_provider("docker").describe(sandbox_id) is not None

    resumed = _cubicle(marks, "drill", "--resume", str(out))
    stdout, stderr = communicate_or_kill(resumed)
    assert resumed.returncode == 0, f"{stdout}\n{stderr}"
    assert f"drill PASSED (resumed on {sandbox_id})" in stdout
    assert get_provider("docker").describe(sandbox_id) is None, "removed once finished"
