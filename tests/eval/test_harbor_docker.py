"""Harbor-shaped task folders in Docker sandboxes: the shipped tasks' Harbor copies pass by their
``solution/solve.sh`` (run in the guest, ``tests/test.sh`` writing /logs/verifier/reward.txt),
the idle model fails them, and planted folders show the verdicts: a failing solve.sh is
``broken_task``, a garbled reward is a check naming the file, reward.json counts over
reward.txt, and a reward planted during the run does not count."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli, start_cli
from tests.support.processes import stop_process

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
COPIES = REPO / "examples" / "harbor"
STALE = "stale model-visible screenshots"


def _records(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "results.jsonl").read_text("utf-8").splitlines()
    return {record["task"]: record for record in map(json.loads, lines)}


def _planted(parent: Path, name: str, *, solve: str, test: str) -> Path:
    """A copy of editor-save's Harbor folder named ``name`` with these scripts."""
    folder = parent / name
    shutil.copytree(COPIES / "editor-save", folder)
    text = (folder / "task.toml").read_text("utf-8").replace('"editor-save"', f'"{name}"')
    (folder / "task.toml").write_text(text, "utf-8")
    (folder / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n", "utf-8")
    (folder / "tests" / "test.sh").write_text(f"#!/bin/bash\n{test}\n", "utf-8")
    return folder


def test_harbor_copies_pass_by_their_solution_and_planted_folders_get_their_verdicts(
    docker_image: str, tmp_path: Path, cubicle_containers: Callable[[int], list[str]]
) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    _planted(planted, "solve-fails", solve="echo no solution >&2; exit 3", test="exit 0")
    _planted(
        planted,
        "reward-garbled",
        solve="true",
        test="mkdir -p /logs/verifier; echo yes > /logs/verifier/reward.txt",
    )
    _planted(
        planted,
        "reward-json",
        solve="true",
        # reward.json wins over reward.txt; it is written only when the helper beside test.sh
        # reached /tests with it
        test="echo 0 > /logs/verifier/reward.txt; grep -q beside /tests/helper.txt && "
        'echo \'{"reward": 1, "other": 0}\' > /logs/verifier/reward.json',
    )
    (planted / "reward-json" / "tests" / "helper.txt").write_text("beside test.sh\n", "utf-8")
    listing = tmp_path / "suite.txt"
    copies = sorted(p.name for p in COPIES.iterdir() if p.is_dir())
    listing.write_text(
        "".join(f"{COPIES / name}\n" for name in copies)
        + "".join(f"planted/{name}\n" for name in ("solve-fails", "reward-garbled", "reward-json")),
        "utf-8",
    )
    out = tmp_path / "oracle"
    process = start_cli("eval", str(listing), "--oracle", "--parallel", "3", "--out", str(out))
    try:
        stdout, stderr = process.communicate(timeout=900)
    finally:
        stop_process(process)
    assert process.returncode == 1, f"{stdout}\n{stderr}"  # the planted broken tasks
    assert cubicle_containers(process.pid) == []
    records = _records(out)
    assert sorted(records) == sorted([*copies, "solve-fails", "reward-garbled", "reward-json"])
    for name in [*copies, "reward-json"]:
        record = records[name]
        assert record["verdict"] == "passed", record
        [check] = [c for c in record["checks"] if c["name"] != STALE]
        assert check == {"name": "tests/test.sh reward", "ok": True, "detail": ""}
        assert (out / record["report"]).is_file()
    failing = records["solve-fails"]
    assert failing["verdict"] == "broken_task", failing
    assert "solution/solve.sh exited with 3" in failing["error"]
    assert "no solution" in failing["error"]
    [check] = [c for c in failing["checks"] if c["name"] != STALE]  # its test.sh wrote nothing
    assert not check["ok"] and check["detail"].startswith(
        "tests/test.sh wrote no reward: neither /logs/verifier/reward.txt nor "
        "/logs/verifier/reward.json"
    ), check
    garbled = records["reward-garbled"]
    assert garbled["verdict"] == "broken_task", garbled
    [check] = [c for c in garbled["checks"] if c["name"] != STALE]
    assert not check["ok"] and "/logs/verifier/reward.txt is not a number" in check["detail"]
    assert "2 broken_task" in stdout


def test_the_idle_model_fails_a_harbor_copy_and_a_planted_reward_does_not_count(
    docker_image: str, tmp_path: Path
) -> None:
    """The idle model only looks: test.sh writes reward 0. A reward written into
    /logs/verifier before the checks run (here by the set-up's files) is removed first."""
    folder = tmp_path / "editor-save"
    shutil.copytree(COPIES / "editor-save", folder)
    desktop = folder / "environment" / "cubicle-desktop.toml"
    desktop.write_text(
        desktop.read_text("utf-8")
        + '\n[[files]]\npath = "/logs/verifier/reward.txt"\ncontent = "1\\n"\n',
        "utf-8",
    )
    out = tmp_path / "idle"
    done = run_cli("eval", str(folder), "--model", "cubicle-idle", "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr
    record = _records(out)["editor-save"]
    assert record["verdict"] == "failed", record
    [check] = [c for c in record["checks"] if c["name"] != STALE]
    assert not check["ok"] and check["detail"].startswith("reward 0 < 1"), check
