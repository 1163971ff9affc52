"""A Harbor task folder on the VM backend: the guest mounts /tests, /solution and /logs for the
desktop user at boot (images/vm/provision's boot.fstab), so editor-save's Harbor copy passes by
its solution/solve.sh, its tests/test.sh writing /logs/verifier/reward.txt in the guest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubicle.orchestrator.providers.vm import VmProvider
from tests.support.cli import run_cli
from tests.vm.conftest import REPO

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def test_a_harbor_copy_passes_by_its_solution_in_a_vm(
    vm_provider: VmProvider, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    folder = REPO / "examples" / "harbor" / "editor-save"
    done = run_cli(
        "eval", str(folder), "--oracle", "--backend", "vm", "--out", str(out), timeout=1200
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    [record] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["verdict"] == "passed", record
    assert {"name": "tests/test.sh reward", "ok": True, "detail": ""} in record["checks"]
