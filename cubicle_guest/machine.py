"""The whole guest's activity and speed: signals a settle waits on beside the focused program's.

**Why.** On a VM with one emulated vCPU (TCG) a program's effect often pauses while *other*
processes work for it: GTK's file dialog waits on D-Bus and gvfs (outside the focused program's
process tree) before it draws its list, and the agent's own waiting competes with them for the
one vCPU. The focused program is idle then, and a wait that ends on its idleness alone returns a
screen that is not final. :class:`MachineLoad` watches the whole guest instead: the CPU every
process but the agent used or waited on I/O with (the time the CPUs were not idle, minus the
agent's own CPU) and the tasks that are runnable (beyond the agent's sampling thread).

**Only where the machine is the sandbox.** In a container ``/proc/uptime`` is the host's (every
container's and the host's own work), so the signal is on only when the agent runs on a machine
of its own: a VM guest sets :data:`WHOLE_MACHINE_ENV` (images/vm/cubicle-init). Without it, or
when the files cannot be read, :func:`open_machine_load` gives ``None`` and settles watch
the programs alone, as before.

**Speed.** :func:`measure_speed` times a small fixed piece of Python at the agent's start:
how many times slower this machine runs it than :data:`SPEED_REFERENCE_S` (at least 1). A guest
emulated by TCG measures several times slower; a container, a KVM or a Mac's HVF guest about 1.
Waits scale by it only what really takes longer on a slow machine (how long busy CPU alone may
hold a wait, :mod:`cubicle_guest.changes`), never the quiet periods that end on the app's signals.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MACHINE_BUSY_SHARE",
    "SPEED_REFERENCE_S",
    "WHOLE_MACHINE_ENV",
    "MachineLoad",
    "MachineSample",
    "measure_speed",
    "open_machine_load",
]

WHOLE_MACHINE_ENV: Final = "CUBICLE_GUEST_WHOLE_MACHINE"
"""Set to ``1`` where the agent's machine is the sandbox alone (a VM guest): its ``/proc``
then tells the sandbox's own activity."""
MACHINE_BUSY_SHARE: Final = 0.2
"""The other processes are busy when they used more than this share of the online CPUs over a
sample window (beyond the tolerance of ``/proc/uptime``'s hundredths of a second)."""
SPEED_REFERENCE_S: Final = 0.004
"""Seconds :func:`measure_speed`'s workload takes on a reference core (a 2020s x86-64 server core
runs it in about 3.3 ms): a machine that takes this long or less has speed 1."""
SPEED_RUNS: Final = 5
"""The workload runs this many times; the fastest counts (a start-up competing for the CPU only
makes a machine look slower, the safe side)."""


def _workload() -> float:
    started = time.perf_counter()
    sum(i * i for i in range(50_000))
    return time.perf_counter() - started


def measure_speed() -> float:
    """How many times slower this machine runs a fixed piece of Python than the reference
    (:data:`SPEED_REFERENCE_S`), at least 1.0, to one decimal."""
    best = min(_workload() for _ in range(SPEED_RUNS))
    return max(1.0, round(best / SPEED_REFERENCE_S, 1))


@dataclass(frozen=True)
class MachineSample:
    """One reading of the machine: when (monotonic seconds), the CPUs' idle time and the agent's
    own CPU (nanoseconds), the online CPU count and the tasks runnable (the reader included)."""

    t: float
    idle_ns: int
    own_ns: int
    cpus: int
    running: int


class MachineLoad:
    """Reads the whole guest's activity (module docstring) from three small files, cheap to read
    every few milliseconds (``/proc/stat`` formats every interrupt's count: far dearer under TCG):
    ``/proc/uptime`` (the CPUs' idle time; time waiting on I/O is not idle, so it counts as work),
    ``/proc/loadavg`` (the tasks runnable now) and ``/sys/devices/system/cpu/online``.

    :param proc: the ``/proc`` to read; :param sys: the ``/sys`` (tests pass others).
    :raises OSError: one cannot be read.
    :raises ValueError: one does not say what it should.
    """

    def __init__(self, proc: str = "/proc", sys: str = "/sys") -> None:
        self._uptime = f"{proc}/uptime"
        self._loadavg = f"{proc}/loadavg"
        self._online = f"{sys}/devices/system/cpu/online"
        self._tick_ns = 10_000_000  # /proc/uptime's idle has two decimals
        self.sample()  # fails here when unreadable

    def sample(self) -> MachineSample:
        """Read the machine now."""
        with open(self._uptime, "rb") as handle:
            uptime = handle.read().split()
        with open(self._loadavg, "rb") as handle:
            loadavg = handle.read().split()
        with open(self._online, "rb") as handle:
            online = handle.read().strip()
        own = time.process_time_ns()  # every thread of the agent
        now = time.monotonic()
        try:
            whole, _, hundredths = uptime[1].partition(b".")
            idle = int(whole) * 100 + int(hundredths or b"0")
            running = int(loadavg[3].split(b"/")[0])
            cpus = _count_cpus(online)
        except (IndexError, ValueError):
            raise ValueError(
                f"cannot read the machine's activity from {self._uptime} ({uptime[:2]!r}), "
                f"{self._loadavg} ({loadavg[3:4]!r}) and {self._online} ({online!r})"
            ) from None
        return MachineSample(now, idle * self._tick_ns, own, cpus, running)

    def other_ns(self, before: MachineSample, after: MachineSample) -> int:
        """CPU (ns) the machine's other processes used (or waited on I/O) between two samples:
        the online CPUs' time not idle, minus the agent's own (never below 0)."""
        elapsed = round((after.t - before.t) * 1e9) * min(before.cpus, after.cpus)
        busy = elapsed - (after.idle_ns - before.idle_ns)
        return max(0, busy - (after.own_ns - before.own_ns))

    def busy(self, before: MachineSample, after: MachineSample, background: float = 0.0) -> bool:
        """Whether the other processes worked between two samples: a task beside the agent's
        sampling thread runnable when ``after`` was read, or their CPU (and I/O wait) over the
        window above :data:`MACHINE_BUSY_SHARE` of the CPUs plus ``background`` (CPUs they use
        while nobody acts) plus one hundredth of a second per CPU (``/proc/uptime``'s
        rounding)."""
        if after.running > 1:
            return True
        elapsed = after.t - before.t
        cpus = min(before.cpus, after.cpus)
        limit = (MACHINE_BUSY_SHARE * cpus + background) * elapsed * 1e9 + self._tick_ns * cpus
        return self.other_ns(before, after) > limit


def _count_cpus(online: bytes) -> int:
    """The CPUs in a kernel CPU list (``0``, ``0-1``, ``0,2-3``)."""
    count = 0
    for part in online.split(b","):
        first, _, last = part.partition(b"-")
        count += int(last or first) - int(first) + 1
    if count < 1:
        raise ValueError(f"no CPU online in {online!r}")
    return count


def open_machine_load() -> MachineLoad | None:
    """A :class:`MachineLoad` when this agent's machine is the sandbox alone
    (:data:`WHOLE_MACHINE_ENV` is ``1``) and its activity can be read; otherwise ``None``."""
    if os.environ.get(WHOLE_MACHINE_ENV) != "1":
        return None
    try:
        return MachineLoad()
    except (OSError, ValueError):
        return None
