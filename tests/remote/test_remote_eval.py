"""``cubicle eval --engine local --engine URL``: a suite spread over this host's engine and a
second one (the engine box over TLS); every sandbox removed on both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L
from tests.orchestrator.support import leftovers
from tests.remote.conftest import Remote, _env
from tests.remote.enginebox import EngineBox
from tests.support.cli import REPO
from tests.support.processes import stop_process

pytestmark = [pytest.mark.docker, pytest.mark.remote, pytest.mark.slow]


def test_a_suite_spread_over_the_local_engine_and_a_remote_one(
    box: EngineBox, remote_image: str, tmp_path: Path
) -> None:
    remote = Remote("tls", box.tcp_url, _env(box, "tls"), box)
    listing = tmp_path / "suite.txt"
    listing.write_text("editor-save\nterminal-output\n", "utf-8")
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "cubicle.orchestrator.cli", "eval", str(listing),
         "--model", "cubicle-idle", "--parallel", "2",
         "--engine", "local", "--engine", box.tcp_url, "--out", str(out)],
        cwd=REPO, env={**os.environ, **remote.env}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=900)
    finally:
        stop_process(process)
    assert process.returncode == 0, stdout + stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(
        (r["task"], r["engine"], r["verdict"], r["sandbox_retries"]) for r in records
    ) == [
        ("editor-save", None, "failed", 0),
        ("terminal-output", box.tcp_url, "failed", 0),
    ]
    local = docker.from_env()
    try:
        owned = {L.OWNER_PID: str(process.pid)}
        assert leftovers(local, owned) == []
        assert leftovers(remote.client, owned) == []
    finally:
        local.close()
