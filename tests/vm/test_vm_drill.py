"""The drill on the VM backend: ``cubicle drill --backend vm --loop toolset`` (the ``desktop``
task, pixels only) end to end in a real libvirt/QEMU guest (scripted model, real SDK loop, real
apps opened from the panel), and nothing left after."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.trajectory import read_trajectory
from tests.vm.conftest import REPO

pytestmark = [pytest.mark.vm, pytest.mark.slow]

DRILL_TIMEOUT_S = 1200
"""Measured under TCG on a loaded host: 8 min up to the form's typing (every action waits for its
app, up to 60 s for a launch); CI's budget holds it."""


def _owned_by(provider: VmProvider, pid: int) -> list[str]:
    """Domains and per-sandbox directories (overlay, socket, console) created by process ``pid``."""
    found = [
        f"domain of {labels[L.SANDBOX]}"
        for _dom, labels in provider._domains()
        if labels.get(L.OWNER_PID) == str(pid)
    ]
    run_root = provider.home / "run"
    for run in sorted(run_root.iterdir()) if run_root.is_dir() else []:
        try:
            labels = json.loads((run / "labels.json").read_text())
        except (OSError, ValueError):
            continue
        if labels.get(L.OWNER_PID) == str(pid):
            found.append(f"run directory {run}")
    return found


def test_cubicle_drill_passes_in_a_vm_and_leaves_nothing(
    vm_provider: VmProvider, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cubicle.orchestrator.cli",
            "drill",
            "--backend",
            "vm",
            "--loop",
            "toolset",
            "--out",
            str(tmp_path / "runs"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=DRILL_TIMEOUT_S)
    finally:
        if process.returncode is None:  # timed out: stop it (its sandbox goes with gc below)
            process.kill()
            process.communicate(timeout=60)
            vm_provider.gc()
    assert process.returncode == 0, f"{stdout}\n{stderr}"
    assert "drill desktop (toolset): PASSED" in stdout, stdout
    assert "drill PASSED on vm" in stdout, stdout
    assert "FAILED" not in stdout, stdout
    assert re.search(r"^desktop +openai +toolset +PASSED +\d+ +\S+ +0/9$", stdout, re.MULTILINE), (
        stdout
    )
    events = read_trajectory(tmp_path / "runs" / "toolset")
    shots = [e for e in events if e["kind"] == "screenshot"]
    assert len(shots) == 9, f"{len(shots)} screenshots in the trajectory, not one per model call"
    kinds = [e["kind"] for e in events]
    assert "guest_wait" not in kinds[kinds.index("model_turn") :], "pixels only after turn 0"
    assert _owned_by(vm_provider, process.pid) == []
