"""Warm-pool members on the VM backend (:class:`VmPoolMembers`, the backend's
:class:`~cubicle.orchestrator.provider.PoolMembers`): the member provider, listing, the atomic claim
and what a drain needs — the same operations as Docker's
(:mod:`cubicle.orchestrator.providers.docker.pool_members`), on the marks of a VM sandbox's run
folder (:mod:`cubicle.orchestrator.providers.vm.run_marks`: ``pool-member`` then ``ready`` when
parked, ``claim.json`` when claimed, each made once).

A member is a VM sandbox made by the normal create path of a provider with a pool key
(``VmProvider(pool_key=KEY)``, :meth:`VmPoolMembers.member_provider`; a warm restore when a saved
state matches its shape; ``allow:``/``open`` members cold-boot, which is what a pool hides), then
one warm-up screenshot (:func:`warm_up`), then parked by its ``mark_ready``. A claim is the hard
link of ``claim.json`` (the claimer's stamp): the first link wins, the others fail with
``EEXIST``. Then the claimer connects and says hello (the VM's channel takes one connection at a
time: ``Sandbox.create`` closes that one before handing the sandbox out).

This module never imports the provider (the provider imports it, for
:meth:`~cubicle.orchestrator.provider.Provider.pool_members`): it works through a :class:`VmHost`,
the part of the provider it uses, and :mod:`.naming`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from cubicle.orchestrator import ownership
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.provider import (
    Claim,
    PoolMembers,
    Provider,
    SandboxInfo,
    SandboxSpec,
)
from cubicle.orchestrator.providers.vm import run_marks
from cubicle.orchestrator.providers.vm.naming import ID_PREFIX
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError

__all__ = ["WARMUP_TIMEOUT_S", "Member", "VmHost", "VmPoolMembers", "warm_up"]

WARMUP_TIMEOUT_S: Final = 60.0
CONNECT_S: Final = 10.0
HELLO_TIMEOUT_S: Final = 10.0

log = logging.getLogger(__name__)


class VmHost(Protocol):
    """What :class:`VmPoolMembers` needs of the VM backend (``VmProvider`` implements it)."""

    home: Path

    def list(self) -> list[SandboxInfo]:
        """The backend's sandboxes."""

    def describe(self, sandbox_id: str) -> SandboxInfo | None:
        """One sandbox as :meth:`list` shows it, or None."""

    def run_dir(self, sandbox_id: str) -> Path:
        """The sandbox's run folder (may not exist)."""

    def run_labels(self, run: Path) -> dict[str, Any] | None:
        """The labels of a run folder, or None."""

    def connect(self, sandbox_id: str, *, timeout: float) -> AgentClient:
        """A connection to the sandbox's agent (no hello sent)."""

    def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything created for it."""


def warm_up(provider: Provider, sandbox_id: str) -> None:
    """This backend's member warm-up (:func:`cubicle.orchestrator.pool_marks.warm_up`) with its
    :data:`WARMUP_TIMEOUT_S`."""
    marks.warm_up(provider, sandbox_id, timeout_s=WARMUP_TIMEOUT_S)


@dataclass(frozen=True)
class Member:
    """A parked, unclaimed VM member of a pool, as listed."""

    sandbox_id: str
    state: str
    expires_at: float


class VmPoolMembers(PoolMembers[Member]):
    """Warm-pool members of the VM backend of ``provider`` (``VmProvider.pool_members`` makes
    it); ``member_provider`` makes that provider's twin with a pool key."""

    def __init__(self, provider: VmHost, member_provider: Callable[[str], Provider]) -> None:
        self.provider = provider
        self._member_provider = member_provider

    def member_provider(self, key: str) -> Provider:
        """A VM provider whose ``mark_ready``, once the agent answered, takes one warm-up
        screenshot (:func:`warm_up`), then writes the member mark, then the ready mark."""
        return self._member_provider(key)

    def members(self, key: str | None = None) -> list[Member]:
        """The unclaimed, parked members of pool ``key`` (of every pool when None), running or
        not."""
        found = []
        for info in self.provider.list():
            if info.ownership != "pool":
                continue
            member_key = run_marks.member_key(self.provider.run_dir(info.id))
            if member_key is not None and key in (None, member_key):
                found.append(Member(info.id, info.state, info.expires_at))
        return found

    def creating_by(self, owners: set[tuple[int, int]]) -> list[str]:
        """Ids of VM sandboxes still being created (no ready mark) by one of ``owners`` here."""
        found = []
        run_root = self.provider.home / "run"
        for run in sorted(run_root.iterdir()) if run_root.is_dir() else []:
            if (run / run_marks.READY).exists() or not ownership.is_sandbox_id(run.name, ID_PREFIX):
                continue
            labels = self.provider.run_labels(run)
            stamp = ownership.skip_malformed(f"VM run folder {run}", labels or {}, ID_PREFIX)
            if (
                stamp is not None
                and stamp.local
                and (stamp.owner.pid, stamp.owner.start_ticks) in owners
            ):
                found.append(stamp.sandbox_id)
        return found

    def take(self, member: Member, spec: SandboxSpec) -> bool:
        """The atomic claim of ``member`` for ``spec`` (its lifetime and ttl), stamped with this
        process; False when another process claimed it first or it is gone."""
        labels = marks.claim_labels(member.sandbox_id, spec)
        try:
            return run_marks.claim(self.provider.run_dir(member.sandbox_id), labels)
        except FileNotFoundError:
            return False  # removed (drained, expired) since it was listed

    def claim(self, key: str, spec: SandboxSpec) -> Claim | None:
        """Claim a ready member of pool ``key`` for ``spec``, with an agent connection (hello
        done), or None when there is none. Two concurrent claims never get the same member."""
        return marks.claim_first(self.members(key), functools.partial(self.claim_member, spec=spec))

    def claim_member(self, member: Member, spec: SandboxSpec) -> Claim | None:
        """Claim ``member`` (:meth:`take`), then connect and say hello; None when another
        claimer won, or the member does not answer (then it is removed: it is ours, no one
        else's to use)."""
        provider = self.provider
        if not self.take(member, spec):
            return None
        client = None
        try:
            client = provider.connect(member.sandbox_id, timeout=CONNECT_S)
            client.hello(timeout=HELLO_TIMEOUT_S)
            info = provider.describe(member.sandbox_id)
        except CubicleError as exc:
            log.warning(
                "claimed member %s does not answer (%s); removing it", member.sandbox_id, exc
            )
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
