"""``python -m cubicle_guest --wait-fd FD``: the agent loads, then waits for the desktop before it
opens the display and listens (the Docker supervisor overlaps the agent's start with the
desktop's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cubicle_guest.client import connect_unix
from tests.support.agent import REPO_ROOT
from tests.support.processes import stop_process
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11


def _start(display: str, socket_path: Path, gate: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cubicle_guest",
            "--listen",
            f"unix:{socket_path}",
            "--wait-fd",
            str(gate),
        ],
        env={**os.environ, "DISPLAY": display},
        pass_fds=(gate,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT,
    )


def _blocked_reading(pid: int, fd: int, timeout_s: float = 30.0) -> bool:
    """True once ``pid`` sits in read(2) on ``fd`` (its imports done: it waits on the gate)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
        if fields[:2] == ["0", hex(fd)]:  # x86-64: read is syscall 0
            return True
        time.sleep(0.02)
    return False


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="reads x86-64 syscall numbers")
def test_the_agent_listens_only_once_the_gate_closes(tmp_path: Path) -> None:
    socket_path = tmp_path / "agent.sock"
    with Xvfb(640, 480) as x:
        gate_r, gate_w = os.pipe()
        agent = _start(x.display, socket_path, gate_r)
        os.close(gate_r)
        try:
            assert _blocked_reading(agent.pid, gate_r), "the agent is not waiting on its gate"
            assert not socket_path.exists(), "the agent listens before the desktop is ready"
            os.close(gate_w)
            gate_w = -1
            deadline = time.monotonic() + 30
            while not socket_path.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            with connect_unix(str(socket_path), timeout=10) as client:
                assert client.hello()["protocol"]
                assert client.screenshot(format="png").result["width"] == 640
        finally:
            if gate_w >= 0:
                os.close(gate_w)
            stop_process(agent)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="reads x86-64 syscall numbers")
def test_a_waiting_agent_stops_on_sigterm(tmp_path: Path) -> None:
    gate_r, gate_w = os.pipe()
    agent = _start(":99999", tmp_path / "agent.sock", gate_r)
    os.close(gate_r)
    try:
        assert _blocked_reading(agent.pid, gate_r)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
    finally:
        os.close(gate_w)
        stop_process(agent)
