"""scripts/daemon: a daemon the ensure-* scripts start (dockerd, libvirtd, ...) must not keep the
caller's lock — under `flock /tmp/cubicle-vm.lock make ...` an inherited lock file stayed locked
for as long as the daemon ran."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("wrapped", [True, False])
def test_a_daemon_started_under_a_lock_does_not_keep_it(tmp_path: Path, wrapped: bool) -> None:
    lock, pidfile = tmp_path / "lock", tmp_path / "pid"
    start = [str(REPO / "scripts" / "daemon")] if wrapped else []
    long_lived = f"sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}"
    subprocess.run(["flock", str(lock), *start, "sh", "-c", long_lived], check=True, timeout=10)
    pid = int(pidfile.read_text())
    try:
        free = subprocess.run(["flock", "-n", str(lock), "true"], check=False).returncode == 0
        assert free == wrapped  # unwrapped: the inherited lock is held (the bug it prevents)
    finally:
        os.kill(pid, signal.SIGKILL)
