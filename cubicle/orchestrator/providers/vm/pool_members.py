"""Pool members on the VM backend: the member provider, listing, the atomic claim and what a
drain needs — the same functions as :mod:`cubicle.orchestrator.pool.docker_pool`, on the marks of a
VM sandbox's run folder (:mod:`cubicle.orchestrator.providers.vm.run_marks`: ``pool-member`` then
``ready`` when parked, ``claim.json`` when claimed, each made once).

A member is a VM sandbox made by the normal create path (a warm restore when a saved state
matches its shape; ``allow:``/``open`` members cold-boot, which is what a pool hides), then one
warm-up screenshot, then parked. A claim is the hard link of ``claim.json`` (the claimer's
stamp): the first link wins, the others fail with ``EEXIST``. Then the claimer connects and says
hello (the VM's channel takes one connection at a time: ``Sandbox.create`` closes that one before
handing the sandbox out).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import Final

from cubicle.orchestrator import ownership
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.claims import Claim
from cubicle.orchestrator.pool.choose import claim_first
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import run_marks
from cubicle.orchestrator.providers.vm.provider import ID_PREFIX, VmProvider
from cubicle_guest.errors import CubicleError

__all__ = [
    "Member",
    "PoolMemberProvider",
    "claim",
    "claim_member",
    "creating_by",
    "members",
    "take",
]

WARMUP_TIMEOUT_S: Final = 60.0
CONNECT_S: Final = 10.0
HELLO_TIMEOUT_S: Final = 10.0

log = logging.getLogger(__name__)


class PoolMemberProvider(VmProvider):
    """The VM provider for making members of pool ``key``: once the agent answered, one warm-up
    screenshot (reads the screen, writes nothing), then the member mark, then the ready mark."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def mark_ready(self, sandbox_id: str) -> None:
        with self.connect(sandbox_id, timeout=WARMUP_TIMEOUT_S) as client:
            client.hello(timeout=WARMUP_TIMEOUT_S)
            client.call("screenshot", {}, timeout=WARMUP_TIMEOUT_S)
        with contextlib.suppress(FileNotFoundError):  # gone: the ready mark then says so
            run_marks.write_member(self.run_dir(sandbox_id), self.key)
        super().mark_ready(sandbox_id)


@dataclass(frozen=True)
class Member:
    """A parked, unclaimed VM member of a pool, as listed."""

    sandbox_id: str
    state: str
    expires_at: float


def members(provider: VmProvider, key: str | None = None) -> list[Member]:
    """The unclaimed, parked members of pool ``key`` (of every pool when None), running or not."""
    found = []
    for info in provider.list():
        if info.ownership != "pool":
            continue
        member_key = run_marks.member_key(provider.run_dir(info.id))
        if member_key is not None and key in (None, member_key):
            found.append(Member(info.id, info.state, info.expires_at))
    return found


def creating_by(provider: VmProvider, owners: set[tuple[int, int]]) -> list[str]:
    """Ids of VM sandboxes still being created (no ready mark) by one of ``owners`` here."""
    found = []
    run_root = provider.home / "run"
    for run in sorted(run_root.iterdir()) if run_root.is_dir() else []:
        if (run / run_marks.READY).exists() or not ownership.is_sandbox_id(run.name, ID_PREFIX):
            continue
        labels = provider.run_labels(run)
        stamp = ownership.skip_malformed(f"VM run folder {run}", labels or {}, ID_PREFIX)
        if (
            stamp is not None
            and stamp.local
            and (stamp.owner.pid, stamp.owner.start_ticks) in owners
        ):
            found.append(stamp.sandbox_id)
    return found


def take(provider: VmProvider, member: Member, spec: SandboxSpec) -> bool:
    """The atomic claim of ``member`` for ``spec`` (its lifetime and ttl), stamped with this
    process; False when another process claimed it first or it is gone."""
    labels = marks.claim_labels(member.sandbox_id, spec)
    try:
        return run_marks.claim(provider.run_dir(member.sandbox_id), labels)
    except FileNotFoundError:
        return False  # removed (drained, expired) since it was listed


def claim(provider: VmProvider, key: str, spec: SandboxSpec) -> Claim | None:
    """Claim a ready member of pool ``key`` for ``spec``, with an agent connection (hello
    done), or None when there is none. Two concurrent claims never get the same member."""
    return claim_first(members(provider, key), functools.partial(claim_member, provider, spec=spec))


def claim_member(provider: VmProvider, member: Member, spec: SandboxSpec) -> Claim | None:
    """Claim ``member`` (:func:`take`), then connect and say hello; None when another claimer
    won, or the member does not answer (then it is removed: it is ours, no one else's to use)."""
    if not take(provider, member, spec):
        return None
    client = None
    try:
        client = provider.connect(member.sandbox_id, timeout=CONNECT_S)
        client.hello(timeout=HELLO_TIMEOUT_S)
        info = provider.describe(member.sandbox_id)
    except CubicleError as exc:
        log.warning("claimed member %s does not answer (%s); removing it", member.sandbox_id, exc)
        info = None
    except BaseException:
        if client is not None:
            client.close()
        provider.destroy(member.sandbox_id)
        raise
    if info is not None and client is not None:
        return Claim(info, client)
    if client is not None:
        client.close()
    provider.destroy(member.sandbox_id)
    return None
