"""Background processes of cubicle on the host, labelled by their command line and ended by pid.

A labelled process runs ``python -m MODULE OPTION VALUE`` (exactly that argv): :func:`module_pids`
finds this user's processes with that argv in ``/proc``, so a process is found (and ended) even
when any record of it is gone, whatever moment its starter was killed at. Users: the live view
server (one per sandbox) and the warm-pool refiller (one per pool).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["alive", "module_pids", "stop_pids"]


def module_pids(module: str, option: str, value: str | None = None) -> list[int]:
    """Pids of this user's processes whose argv is ``PYTHON -m MODULE OPTION VALUE`` (any value
    when ``value`` is None)."""
    uid = os.geteuid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if (
            len(argv) == 5
            and argv[1:4] == [b"-m", module.encode(), option.encode()]
            and (value is None or argv[4] == value.encode())
        ):
            found.append(int(entry.name))
    return found


def stop_pids(pids: Sequence[int], timeout_s: float) -> None:
    """SIGTERM ``pids``, then SIGKILL those still alive after ``timeout_s`` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
