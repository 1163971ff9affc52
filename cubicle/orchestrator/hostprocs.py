"""Processes on the host, found by their command line in ``/proc`` and ended by pid.

:func:`processes` is the one scan of ``/proc`` (pid and argv of each process; a process that
exits mid-scan is skipped, never an error). Its users:

- :func:`module_pids`: this user's labelled background processes, ``python -m MODULE OPTION
  VALUE`` (exactly that argv), found (and ended, :func:`stop_pids`) even when any record of them
  is gone, whatever moment their starter was killed at. Users: the live view server (one per
  sandbox) and the warm-pool refiller (one per pool).
- :func:`cubicle.orchestrator.providers.vm.qemu_process.find_qemu`: the QEMU of a sandbox's domain.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cubicle_guest.waiting import Deadline, poll

__all__ = ["Process", "alive", "argv_of", "module_pids", "processes", "stop_pids"]

PROC = "/proc"
STOP_POLL_S = 0.02
"""How often :func:`stop_pids` looks whether the signalled processes are gone."""


@dataclass(frozen=True, slots=True)
class Process:
    """A process seen by :func:`processes`: its pid and its argv (bytes: argv need not be text)."""

    pid: int
    argv: tuple[bytes, ...]


def argv_of(pid: int) -> tuple[bytes, ...] | None:
    """The argv of ``pid`` (``/proc/PID/cmdline``), or None when there is no such process or its
    argv is empty (kernel threads, zombies)."""
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as source:
            data = source.read()
    except OSError:  # gone (ENOENT/ESRCH), or not ours to read
        return None
    if not data:
        return None
    # each argument ends with a NUL; a process that rewrote its title may drop the last one
    return tuple(data.removesuffix(b"\0").split(b"\0"))


def processes(uid: int | None = None) -> Iterator[Process]:
    """Every process with an argv (of user ``uid`` only, when given), in pid order of ``/proc``'s
    listing. Processes that exit during the scan are skipped; where there is no ``/proc``
    (macOS), nothing is yielded."""
    try:
        names = os.listdir(PROC)
    except FileNotFoundError:
        return
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if uid is not None:
            try:
                if os.stat(f"{PROC}/{name}").st_uid != uid:
                    continue
            except OSError:
                continue
        argv = argv_of(pid)
        if argv is not None:
            yield Process(pid, argv)


def module_pids(module: str, option: str, value: str | None = None) -> list[int]:
    """Pids of this user's processes whose argv is ``PYTHON -m MODULE OPTION VALUE`` (any value
    when ``value`` is None)."""
    label = (b"-m", module.encode(), option.encode())
    return [
        process.pid
        for process in processes(uid=os.geteuid())
        if len(process.argv) == 5
        and process.argv[1:4] == label
        and (value is None or process.argv[4] == value.encode())
    ]


def stop_pids(pids: Sequence[int], timeout_s: float) -> None:
    """SIGTERM ``pids``, then SIGKILL those still alive after ``timeout_s`` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for _ in poll(Deadline(timeout_s), STOP_POLL_S):
        if not any(alive(pid) for pid in pids):
            return
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"{PROC}/{pid}/stat") as source:
            stat = source.read()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
