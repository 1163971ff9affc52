"""``cubicle eval`` end to end in Docker sandboxes: the shipped tasks' oracles all pass, the idle
model fails every check, a planted task whose oracle fails is ``broken_task``, and a suite
killed with SIGKILL then resumed runs only what it had not finished — and leaves no sandbox."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.eval.oracle import PERSON_ANSWER
from cubicle.orchestrator.tasks import shipped_tasks
from cubicle.orchestrator.trajectory import read_trajectory
from tests.drill.pixels_only import assert_pixels_only_play
from tests.support.cli import run_cli, start_cli
from tests.support.processes import stop_process

pytestmark = [pytest.mark.docker, pytest.mark.slow]

STALE = "stale model-visible screenshots"  # the scripted players' own check, not decisive


def _eval(*args: str) -> subprocess.Popen[str]:
    return start_cli("eval", *args)


def _finish(process: subprocess.Popen[str], timeout: float = 900) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    finally:
        stop_process(process)


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "results.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _shipped() -> list[str]:
    return sorted(task.name for task in shipped_tasks())


def test_every_shipped_oracle_passes_in_parallel_and_each_attempt_links_its_report(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    out = tmp_path / "oracle"
    process = _eval("tasks", "--oracle", "--parallel", "3", "--out", str(out))
    stdout, stderr = _finish(process)
    assert process.returncode == 0, f"{stdout}\n{stderr}"
    assert cubicle_containers(process.pid) == []
    records = _records(out)
    assert sorted(r["task"] for r in records) == _shipped(), "every shipped task exactly once"
    for record in records:
        assert record["verdict"] == "passed", record
        assert record["attempt"] == 1 and record["seconds"] > 0 and record["steps"] > 0
        task_checks = [c for c in record["checks"] if c["name"] != STALE]
        assert task_checks and all(check["ok"] for check in task_checks), record
        assert (out / record["report"]).is_file()
        # the runner loop's play of every shipped task (drill --all in make test: the toolset's)
        trajectory = (out / record["report"]).parent
        assert_pixels_only_play(read_trajectory(trajectory), record["task"])
    total = len(_shipped())
    assert f"total: {total}/{total} passed (pass rate 100%), pass@1 1.00" in stdout
    index = (out / "index.html").read_text("utf-8")
    for link in re.findall(r'href="([^"]+)"', index):
        assert (out / link).is_file(), link
    assert len(set(re.findall(r'href="([^"]+)"', index))) == total
    # the person's answer reached the task through the eval's callback, never the model
    asked = next(r for r in records if r["task"] == "ask-user")
    trajectory = (out / asked["report"]).parent / "trajectory.jsonl"
    outputs = [
        json.loads(line)
        for line in trajectory.read_text("utf-8").splitlines()
        if '"function_output"' in line
    ]
    assert [o["output"] for o in outputs] == [PERSON_ANSWER]


def test_the_idle_model_fails_every_check_of_every_shipped_task(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    out = tmp_path / "idle"
    process = _eval("tasks", "--model", "cubicle-idle", "--parallel", "3", "--out", str(out))
    stdout, stderr = _finish(process)
    assert process.returncode == 0, f"{stdout}\n{stderr}"
    assert cubicle_containers(process.pid) == []
    records = _records(out)
    assert sorted(r["task"] for r in records) == _shipped()
    for record in records:
        assert record["verdict"] == "failed", record
        task_checks = [c for c in record["checks"] if c["name"] != STALE]
        assert task_checks and not any(c["ok"] for c in task_checks), record
    assert f"total: 0/{len(records)} passed (pass rate 0%)" in stdout


def test_a_task_whose_oracle_fails_is_broken_task_not_a_model_failure(
    docker_image: str, tmp_path: Path
) -> None:
    suite = tmp_path / "planted"
    suite.mkdir()
    (suite / "wrong.toml").write_text(
        'prompt = "Add bread to {WORKDIR}/todo.txt."\n'
        '[[setup.files]]\npath = "todo.txt"\ncontent = "milk\\n"\n'
        '[[checks]]\nfile = "{WORKDIR}/todo.txt"\nequals = "milk\\nbread\\n"\n'
        '[scripted]\nscript = "wrong.script.json"\n',
        "utf-8",
    )
    (suite / "wrong.script.json").write_text(
        json.dumps({"name": "wrong", "turns": [{"message": "Done (it did nothing)."}]}), "utf-8"
    )
    done = run_cli("eval", str(suite), "--oracle", "--out", str(tmp_path / "out"), timeout=600)
    assert done.returncode == 1, done.stderr
    [record] = _records(tmp_path / "out")
    assert (record["task"], record["verdict"]) == ("wrong", "broken_task")
    assert record["checks"][0] == {
        "name": "file /home/cubicle/task/todo.txt equals text",
        "ok": False,
        "detail": record["checks"][0]["detail"],
    }
    assert "1 broken_task" in done.stdout


def test_kill_9_mid_suite_then_resume_runs_only_the_unfinished_attempts(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    listing = tmp_path / "suite.txt"
    listing.write_text("editor-save\nterminal-output\n", "utf-8")
    out = tmp_path / "out"
    options = ("--model", "cubicle-idle", "--attempts", "2", "--parallel", "2")
    process = _eval(str(listing), *options, "--out", str(out))
    assert process.stderr is not None
    try:
        for line in process.stderr:  # until the first attempt's record is written
            if re.search(r"#\d: failed in", line):
                break
        else:
            pytest.fail(f"no attempt ended; exit {process.wait()}")
        process.kill()  # SIGKILL: nothing of cubicle eval runs after this
        process.wait(timeout=30)
    finally:
        stop_process(process)
    before = (out / "results.jsonl").read_bytes()
    finished = {(r["task"], r["attempt"]) for r in _records(out)}
    assert 1 <= len(finished) < 4
    gc = run_cli("gc", timeout=300)
    assert gc.returncode == 0, gc.stderr
    assert cubicle_containers(process.pid) == [], "gc removes what the killed eval left"

    resumed = _eval(str(listing), *options, "--resume", str(out))
    stdout, stderr = _finish(resumed)
    assert resumed.returncode == 0, f"{stdout}\n{stderr}"
    assert cubicle_containers(resumed.pid) == []
    after = (out / "results.jsonl").read_bytes()
    assert after.startswith(before), "records are only appended"
    new = [json.loads(line) for line in after[len(before) :].decode().splitlines()]
    assert {(r["task"], r["attempt"]) for r in new} == {
        (task, n) for task in ("editor-save", "terminal-output") for n in (1, 2)
    } - finished, "the finished attempts were not run again"
    # the same totals as an uninterrupted run of the idle model: every attempt failed
    assert "total: 0/4 passed (pass rate 0%), pass@1 0.00, pass@2 0.00; 4 failed" in stdout

    again = run_cli("eval", str(listing), *options, "--resume", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "results.jsonl").read_bytes() == after, "a finished suite appends nothing"


def test_ctrl_c_records_the_running_attempts_interrupted_and_removes_their_sandboxes(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    listing = tmp_path / "suite.txt"
    listing.write_text("editor-save\nterminal-output\n", "utf-8")
    out = tmp_path / "out"
    options = ("--model", "cubicle-idle", "--parallel", "2")
    process = _eval(str(listing), *options, "--out", str(out))
    assert process.stderr is not None
    try:
        started = 0
        for line in process.stderr:  # both attempts running
            started += line.endswith(": started\n")
            if started == 2:
                break
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=300)
    finally:
        stop_process(process)
    assert process.returncode == 130, stderr
    assert cubicle_containers(process.pid) == [], "every sandbox removed, no gc needed"
    records = _records(out)
    assert {(r["task"], r["verdict"]) for r in records} == {
        ("editor-save", "interrupted"),
        ("terminal-output", "interrupted"),
    }, records
    resumed = run_cli("eval", str(listing), *options, "--resume", str(out), timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 to run" in resumed.stderr, "interrupted attempts are not finished"
    assert "total: 0/2 passed (pass rate 0%), pass@1 0.00; 2 failed" in resumed.stdout


USAGE = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}


def test_a_responses_model_is_scored_with_its_tokens_and_an_unreachable_one_is_model_error(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    listing = tmp_path / "suite.txt"
    listing.write_text("editor-save\n", "utf-8")
    script = {
        "name": "looks-only",
        "turns": [
            {"computer_call": {"actions": [{"type": "screenshot"}]}, "usage": USAGE},
            {"message": "Nothing done.", "usage": USAGE},
        ],
    }
    with ScriptedModel(parse_script(script), raise_on_exit=False) as model:
        done = run_cli(
            "eval", str(listing), "--model", "some-model", "--out", str(tmp_path / "a"),
            env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "offline-test"},
            timeout=600,
        )  # fmt: skip
        assert model.finished and not model.failures
    assert done.returncode == 0, done.stderr
    [record] = _records(tmp_path / "a")
    assert (record["verdict"], record["tokens"]) == ("failed", 240)
    assert "tokens 240" in done.stderr and "0/1 passed" in done.stdout
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        done = run_cli(
            "eval", str(listing), "--model", "some-model", "--out", str(tmp_path / "b"),
            env={"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "offline-test"},
            timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [record] = _records(tmp_path / "b")
    assert record["verdict"] == "model_error", record
    assert "APIConnectionError" in record["error"]


def test_attempts_are_spread_over_the_engines_given(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    """Two engines, in turn: the local one, and one that is not there (every attempt sent to it
    is a sandbox error, tried once more there) — each record names where it ran."""
    listing = tmp_path / "suite.txt"
    listing.write_text("editor-save\n", "utf-8")
    absent = f"unix://{tmp_path}/no-engine.sock"
    done = run_cli(
        "eval", str(listing), "--model", "cubicle-idle", "--attempts", "2", "--parallel", "2",
        "--engine", "local", "--engine", absent, "--out", str(tmp_path / "out"), timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    records = {r["attempt"]: r for r in _records(tmp_path / "out")}
    assert (records[1]["engine"], records[1]["verdict"]) == (None, "failed")
    assert (records[2]["engine"], records[2]["verdict"]) == (absent, "sandbox_error")
    assert records[2]["sandbox_retries"] == 1
