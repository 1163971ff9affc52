"""``cubicle run`` offline: the real command against the scripted model through OPENAI_BASE_URL."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.tasks import fill, load_task
from cubicle.orchestrator.trajectory import read_trajectory
from tests.drill.conftest import PYTHON, REPO
from tests.support.cli import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _run_cli(model: ScriptedModel, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "offline-test"}
    return subprocess.run(
        [PYTHON, "-m", "cubicle.orchestrator.cli", "run", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _script(first_call: dict[str, Any]) -> ScriptedModel:
    data = {
        "name": "run-test",
        "model_view": {"width": 1024, "height": 640},
        "turns": [{"computer_call": first_call}, {"message": "All done."}],
    }
    return ScriptedModel(parse_script(data), raise_on_exit=False)


def test_run_prints_the_final_message_and_fails_a_verify_file_that_does_not_hold(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    with _script({"actions": [{"type": "move", "x": 512, "y": 320}]}) as model:
        result = _run_cli(
            model,
            "tidy up",
            "--view",
            "1024x640",
            "--out",
            str(tmp_path / "out"),
            "--verify-file",
            "/home/cubicle/absent.txt=hello",
        )
        assert model.finished and not model.failures
    assert result.returncode == 1, result.stderr
    assert "All done." in result.stdout
    assert (
        "FAILED  file /home/cubicle/absent.txt: /home/cubicle/absent.txt does not exist"
        in result.stdout
    )
    assert 'expected: "hello"' in result.stdout
    events = read_trajectory(tmp_path / "out")
    moves = [e for e in events if e["kind"] == "action"]
    assert [(m["model"], m["native"]) for m in moves] == [
        ({"x": 512, "y": 320}, {"x": 640, "y": 400})
    ]
    assert (tmp_path / "out" / "report.html").is_file()
    # the default loop is the runner with the default budget; the usage totals are printed
    run = next(e for e in events if e["kind"] == "run")
    assert (run["loop"], run["context_budget"]) == ("runner", "images=8,bytes=4194304")
    assert "tokens: 0 in (0 cached), 0 out (0 reasoning), 0 total over 2 requests" in result.stderr
    assert [e["images"] for e in events if e["kind"] == "model_request"] == [0, 1]


def test_a_context_budget_for_the_toolset_loop_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "offline-test"}
    flags = ["--loop", "toolset", "--context-budget", "images=3", "--out", str(tmp_path / "out")]
    result = subprocess.run(
        [PYTHON, "-m", "cubicle.orchestrator.cli", "run", "x", *flags],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "--context-budget needs --loop runner" in result.stderr
    assert not (tmp_path / "out").exists()


def test_run_without_a_terminal_refuses_safety_checks_and_runs_nothing(
    docker_image: str, tmp_path: Path
) -> None:
    call = {
        "actions": [{"type": "click", "button": "left", "x": 10, "y": 10}],
        "pending_safety_checks": [
            {"id": "sc_run", "code": "malicious_instructions", "message": "test"}
        ],
    }
    with _script(call) as model:
        result = _run_cli(model, "click it", "--out", str(tmp_path / "out"))
    assert result.returncode == 1, result.stderr
    assert "approval" in result.stderr
    events = read_trajectory(tmp_path / "out")
    assert [e for e in events if e["kind"] == "action"] == []
    refusal = next(e for e in events if e["kind"] == "approval")
    assert refusal["allowed"] is False and refusal["by"] == "non-interactive"


def test_run_with_a_policy_file_approves_by_rule(docker_image: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        'version = 1\ndefault = "allow"\n\n[[check]]\ndecision = "allow"\n'
        'codes = ["malicious_instructions"]\n',
        encoding="utf-8",
    )
    call = {
        "actions": [{"type": "click", "button": "left", "x": 10, "y": 10}],
        "pending_safety_checks": [
            {"id": "sc_run", "code": "malicious_instructions", "message": "test"}
        ],
    }
    with _script(call) as model:
        result = _run_cli(
            model,
            "click it",
            "--policy",
            str(policy),
            "--view",
            "1024x640",
            "--out",
            str(tmp_path / "out"),
        )
    assert result.returncode == 0, result.stderr
    events = read_trajectory(tmp_path / "out")
    assert [e["type"] for e in events if e["kind"] == "action"] == ["click"]


def test_run_with_a_task_file_sets_up_prints_effective_settings_and_runs_its_checks(
    docker_image: str, tmp_path: Path
) -> None:
    task = load_task("terminal-output")
    script = {**fill(task.script(), task.placeholders("/home/cubicle")), "model_view": [1024, 640]}
    with ScriptedModel(parse_script(script), raise_on_exit=False) as model:
        result = _run_cli(
            model,
            "--task",
            "terminal-output",
            "--view",
            "1024x640",
            "--max-steps",
            "9",
            "--out",
            str(tmp_path / "out"),
        )
        assert model.finished and not model.failures
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert f"effective task: terminal-output ({task.source})" in result.stderr
    assert "effective max_steps: 9 (--max-steps)" in result.stderr
    assert "effective network: none (task file)" in result.stderr
    assert "effective stall: 8 (task file)" in result.stderr
    assert "ok      the count saved by the terminal" in result.stdout
    assert "ok      count matches words.txt" in result.stdout
    events = read_trajectory(tmp_path / "out")
    run = next(e for e in events if e["kind"] == "run")
    assert (
        run["task"].strip().startswith("Open the Terminal") and "/home/cubicle/task" in run["task"]
    )


def test_run_without_a_key_says_how_to_fix_it(tmp_path: Path) -> None:
    result = run_cli("run", "x", timeout=60, unset={"OPENAI_API_KEY"})
    assert result.returncode == 1
    assert "OPENAI_API_KEY is not set" in result.stderr and "cubicle drill" in result.stderr
