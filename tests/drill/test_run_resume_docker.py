"""``cubicle run --resume DIR`` (issue 45): the real ``cubicle run`` process, driven by the
scripted model through ``OPENAI_BASE_URL``, is killed by SIGKILL after turn 3; ``gc`` spares its
sandbox; a second scripted model (what the real model would do: it continues from the turn the
ledger resumes at, and does not redo what the fresh screenshot shows done) serves the resumed
run, which finishes the task's checks on the same sandbox with every action performed once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.drill.runner import actions_performed, input_log
from cubicle.orchestrator.modelrun.ledger import load_ledger
from cubicle.orchestrator.providers import get_provider
from cubicle.orchestrator.resume_marks import DIR_ENV
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.tasks import fill, load_task
from cubicle.orchestrator.trajectory import read_trajectory
from cubicle_guest.input_log import INPUT_OPS
from tests.support.cli import run_cli, start_cli
from tests.support.processes import communicate_or_kill

pytestmark = [pytest.mark.docker, pytest.mark.slow]

POLICY = (
    'version = 1\ndefault = "allow"\n\n[[check]]\ndecision = "allow"\n'
    'codes = ["irreversible_action"]\n'
)


@pytest.fixture
def out(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "run"
    yield folder
    resume = folder / "resume.json"
    if resume.exists():  # whatever the test left
        get_provider("docker").destroy(str(json.loads(resume.read_text())["sandbox"]))


def _script() -> dict[str, Any]:
    task = load_task("desktop")
    return {**fill(task.script(), task.placeholders("/home/cubicle")), "model_view": [1024, 640]}


def _cubicle_run(model: ScriptedModel, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "offline-test",
        DIR_ENV: str(tmp_path / "marks"),
    }
    return start_cli("run", *args, env=env, stdin=subprocess.DEVNULL)


def test_kill_9_of_cubicle_run_then_resume_finishes_on_the_same_sandbox(
    docker_image: str, tmp_path: Path, out: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    script = parse_script(_script())
    with ScriptedModel(script, raise_on_exit=False) as first:
        process = _cubicle_run(
            first,
            tmp_path,
            "--task",
            "desktop",
            "--view",
            "1024x640",
            "--settle",
            "expect_ms=300,quiet_ms=400,cap_ms=10000",
            "--policy",
            str(policy),
            "--out",
            str(out),
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            trajectory = out / "trajectory.jsonl"
            events = read_trajectory(out) if trajectory.exists() else []
            if sum(e["kind"] == "action" for e in events) >= 4:  # turn 3 acted
                break
            time.sleep(0.05)
        assert process.poll() is None, "cubicle run ended before the kill"
        process.send_signal(signal.SIGKILL)
        communicate_or_kill(process, 60)
    sandbox_id = str(json.loads((out / "resume.json").read_text())["sandbox"])
    gc = run_cli("gc", timeout=300, env={DIR_ENV: str(tmp_path / "marks")})
    assert gc.returncode == 0 and sandbox_id not in gc.stdout.split(), gc.stderr

    saved = load_ledger(out)
    with Sandbox.attach(sandbox_id) as sandbox:
        client = sandbox.connect()
        try:
            logged = len(input_log(client))
        finally:
            client.close()
    start = saved.completed_turns
    skip = actions_performed(script.turns, start, logged) if saved.uncertain else 0
    with ScriptedModel(script, raise_on_exit=False, start=start, skip_actions=skip) as second:
        resumed = _cubicle_run(second, tmp_path, "--resume", str(out), "--keep")
        stdout, stderr = communicate_or_kill(resumed)
        assert second.finished and not second.failures, (second.failures, stderr[-4000:])
    assert resumed.returncode == 0, f"{stdout}\n{stderr}"
    assert f"{sandbox_id}: resuming after {start} completed turns" in stderr
    assert "ok      note saved through the editor" in stdout
    assert "ok      form submitted in the browser" in stdout

    with Sandbox.attach(sandbox_id) as sandbox:
        client = sandbox.connect()
        try:
            performed = [entry["op"] for entry in input_log(client)]
        finally:
            client.close()
    scripted = [
        action["type"]
        for turn in script.turns
        for action in turn.actions or ()
        if action["type"] in INPUT_OPS
    ]
    assert performed == scripted, "every action performed exactly once"
    events = read_trajectory(out)
    kinds = [e["kind"] for e in events]
    assert kinds.count("run") == kinds.count("resume") == kinds.count("end") == 1
    run = next(e for e in events if e["kind"] == "run")
    resume = next(e for e in events if e["kind"] == "resume")
    assert run["sandbox"] == resume["sandbox"] == sandbox_id
    assert next(e for e in events if e["kind"] == "end")["ok"] is True
