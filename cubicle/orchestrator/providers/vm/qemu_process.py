"""The QEMU process of a sandbox's domain: found by its command line, ended by pid, waited for
with a pidfd (Linux) — the fast first half of a teardown.

Why: libvirt's ``virDomainDestroy`` sends QEMU SIGTERM and then looks every 200 ms whether it is
gone, so a destroy costs whole 200 ms steps on top of QEMU's own exit. A sandbox's QEMU holds
nothing worth a graceful stop (its overlay is deleted right after), so
:meth:`~cubicle.orchestrator.providers.vm.provider.VmProvider.destroy` first ends it here with
SIGKILL and waits until the kernel has reaped it; libvirt's destroy then finds the process gone at
its first look and only cleans up its own records.

Identity: a process is the sandbox's QEMU only if its command line names the domain
(``guest=NAME``) *and* the sandbox's run folder (its overlay and channel live there), so no other
process — another sandbox's, another user's QEMU, a reused pid — is ever signalled. Where
``/proc`` or pidfds do not exist (macOS), :func:`find_qemu` returns None and libvirt alone stops
the domain.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from pathlib import Path

from cubicle.orchestrator.hostprocs import argv_of, processes
from cubicle_guest.waiting import Deadline, poll

__all__ = ["end_qemu", "find_qemu"]

REAP_POLL_S = 0.005
"""How often to look whether the killed QEMU's zombie was reaped (by its parent, usually PID 1)."""
REAP_WAIT_S = 0.5
"""How long to wait for that at most: libvirt's own destroy copes with a zombie (it waits in
200 ms steps), so this only keeps the fast path fast."""


def _is_qemu_of(argv: tuple[bytes, ...] | None, domain: str, run: Path) -> bool:
    if not argv:
        return False
    name = f"guest={domain},".encode()
    folder = str(run).rstrip("/").encode() + b"/"
    return (
        b"qemu" in argv[0]
        and any(name in arg for arg in argv)
        and any(folder in arg for arg in argv)
    )


def find_qemu(domain: str, run: Path) -> int | None:
    """The pid of the QEMU process running ``domain`` from the run folder ``run``, or None."""
    for process in processes():
        if _is_qemu_of(process.argv, domain, run):
            return process.pid
    return None


def end_qemu(pid: int, domain: str, run: Path, timeout: float = 5.0) -> bool:
    """SIGKILL the QEMU ``pid`` (:func:`find_qemu`) and wait until it has exited (at most
    ``timeout``) and been reaped (at most :data:`REAP_WAIT_S` more). True when it is gone;
    False when it is not yet, or when ``pid`` is no longer that QEMU (then nothing is
    signalled).
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        # the pidfd pins the process: checked after opening it, the identity cannot change
        if not _is_qemu_of(argv_of(pid), domain, run):
            return not Path(f"/proc/{pid}").exists()
        deadline = Deadline(timeout)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        select.select([pidfd], [], [], deadline.remaining())  # readable once it has exited
    finally:
        os.close(pidfd)
    # its parent (libvirt made it PID 1's) reaps the zombie; libvirt's first look must find none
    reaped = Deadline(min(REAP_WAIT_S, deadline.remaining()))
    return any(not Path(f"/proc/{pid}").exists() for _ in poll(reaped, REAP_POLL_S))
