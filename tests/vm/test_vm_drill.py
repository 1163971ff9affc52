"""The drill on the VM backend: ``cubicle drill --backend vm --loop toolset`` end to end in a
real libvirt/QEMU guest (scripted model, real SDK loop, real apps), and nothing left after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import labels as L
from orchestrator.providers.vm import VmProvider
from orchestrator.trajectory import read_trajectory
from tests.vm.conftest import REPO

pytestmark = [pytest.mark.vm, pytest.mark.slow]

DRILL_TIMEOUT_S = 480


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
            "orchestrator.cli",
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
    assert "drill (toolset): PASSED" in stdout, stdout
    assert "drill PASSED (toolset)" in stdout, stdout
    assert "FAILED" not in stdout, stdout
    shots = [e for e in read_trajectory(tmp_path / "runs" / "toolset") if e["kind"] == "screenshot"]
    assert len(shots) >= 10, f"only {len(shots)} screenshots in the trajectory"
    assert _owned_by(vm_provider, process.pid) == []
