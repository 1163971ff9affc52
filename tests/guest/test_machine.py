"""The whole guest's activity (:mod:`cubicle_guest.machine`): a process outside the programs an
action reached holds a VM's settle, and the machine's speed is measured, not assumed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cubicle_guest.launches import CpuWatch
from cubicle_guest.machine import (
    WHOLE_MACHINE_ENV,
    MachineLoad,
    measure_speed,
    open_machine_load,
)


def _machine(root: Path, idle_s: float = 10.0, running: int = 1, online: str = "0") -> None:
    """Write the files :class:`MachineLoad` reads under ``root`` (its ``proc`` and ``sys``)."""
    (root / "proc").mkdir(exist_ok=True)
    (root / "sys/devices/system/cpu").mkdir(parents=True, exist_ok=True)
    (root / "proc/uptime").write_text(f"1234.56 {idle_s:.2f}\n")
    (root / "proc/loadavg").write_text(f"0.10 0.20 0.30 {running}/123 4567\n")
    (root / "sys/devices/system/cpu/online").write_text(online + "\n")


def test_a_process_outside_the_watched_programs_keeps_the_machine_busy() -> None:
    """The GTK file dialog waits on gvfs and D-Bus, outside the focused program's tree: with the
    machine watched, their work is busy; the programs' own watch calls the same moment idle."""
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        machine = MachineLoad()
        programs = CpuWatch([sleeping.pid])
        whole = CpuWatch([sleeping.pid], machine=machine, machine_before=None)
        start = time.monotonic()
        time.sleep(0.1)
        assert not programs.busy()
        assert whole.busy()
        verdicts = []
        while time.monotonic() < start + 0.5:
            verdicts.append(whole.idle_since(start, 0.05))
            time.sleep(0.02)
        assert True not in verdicts, "idle while another process spins"
    finally:
        for process in (spinning, sleeping):
            process.kill()
            process.wait()


def test_runnable_tasks_and_cpu_are_read_from_proc(tmp_path: Path) -> None:
    _machine(tmp_path)
    load = MachineLoad(str(tmp_path / "proc"), str(tmp_path / "sys"))
    quiet = load.sample()
    assert (quiet.cpus, quiet.running, quiet.idle_ns) == (1, 1, 10_000_000_000)
    time.sleep(0.2)
    _machine(tmp_path, idle_s=10.2)  # idle 0.2 s of 0.2 s: nothing else ran
    assert not load.busy(quiet, load.sample())
    _machine(tmp_path, idle_s=10.2, running=2)  # another task waits for the CPU
    assert load.busy(quiet, load.sample())
    _machine(tmp_path)  # 0.2 s without idle time: the others used the CPU (or waited on I/O)
    assert load.busy(quiet, load.sample())
    assert not load.busy(quiet, load.sample(), background=2.0), "within their background rate"
    _machine(tmp_path, online="0,2-3")
    assert load.sample().cpus == 3
    (tmp_path / "proc/loadavg").write_text("0.10 0.20\n")
    with pytest.raises(ValueError, match="cannot read the machine's activity"):
        load.sample()


def test_the_machine_is_watched_only_where_it_is_the_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a container /proc/stat is the host's: only a VM guest's init sets the variable."""
    monkeypatch.delenv(WHOLE_MACHINE_ENV, raising=False)
    assert open_machine_load() is None
    monkeypatch.setenv(WHOLE_MACHINE_ENV, "1")
    assert isinstance(open_machine_load(), MachineLoad)


def test_the_speed_is_measured() -> None:
    speed = measure_speed()
    assert speed >= 1.0
    assert speed == round(speed, 1)
