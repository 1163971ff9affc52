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

STAT = """cpu  100 0 50 {idle} 0 0 0 0 0 0
cpu0 100 0 50 {idle} 0 0 0 0 0 0
intr 1 2 3
ctxt 42
procs_running {running}
procs_blocked {blocked}
"""


def _stat(path: Path, idle: int = 1000, running: int = 1, blocked: int = 0) -> None:
    path.write_text(STAT.format(idle=idle, running=running, blocked=blocked))


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


def test_runnable_and_io_blocked_tasks_and_cpu_are_read_from_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat)
    load = MachineLoad(str(stat))
    quiet = load.sample()
    assert (quiet.cpus, quiet.running, quiet.blocked) == (1, 1, 0)
    time.sleep(0.2)
    _stat(stat, idle=1000 + 20)  # idle 0.2 s of 0.2 s: nothing else ran
    assert not load.busy(quiet, load.sample())
    _stat(stat, idle=1000 + 20, running=2)  # another task waits for the CPU
    assert load.busy(quiet, load.sample())
    _stat(stat, idle=1000 + 20, blocked=1)  # a task waits on the disk
    assert load.busy(quiet, load.sample())
    _stat(stat, idle=1000)  # 0.2 s without idle time: the others used the CPU
    assert load.busy(quiet, load.sample())
    assert not load.busy(quiet, load.sample(), background=2.0), "within their background rate"
    stat.write_text("cpu  1 2 3 4 5 6 7\n")
    with pytest.raises(ValueError, match="no per-CPU or procs_running lines"):
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
