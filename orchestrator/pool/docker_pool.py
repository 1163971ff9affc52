"""Pool members on Docker: the member provider (its ready mark is the pool name), listing, the
atomic claim and the drain (:mod:`orchestrator.pool.marks` for the names).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Final

import docker.errors

from orchestrator import labels as L
from orchestrator import ownership
from orchestrator.errors import SandboxNotFound
from orchestrator.pool import marks
from orchestrator.provider import SandboxInfo, SandboxSpec
from orchestrator.providers.docker.errors import map_docker_errors
from orchestrator.providers.docker.provider import CREATING_SUFFIX, DockerProvider, guest_name

__all__ = ["CLAIM_MARGIN_S", "Member", "PoolMemberProvider", "claim", "members", "take"]

CLAIM_MARGIN_S: Final = 60.0
"""A member this close to its expiry is never claimed (so ``gc``, which takes it once expired,
cannot race a claim)."""
WARMUP_TIMEOUT_S: Final = 30.0


class PoolMemberProvider(DockerProvider):
    """The Docker provider for making members of pool ``key``: the ready mark is the member
    name ``cubicle-<id>.pool.<key>`` (set once, after a warm-up screenshot) instead of
    ``cubicle-<id>``."""

    def __init__(self, key: str, client: docker.DockerClient | None = None) -> None:
        super().__init__(client)
        self.key = key

    def mark_ready(self, sandbox_id: str) -> None:
        # one screenshot before parking it: the claimer's first one then finds the agent's
        # capture path loaded and warm. It reads the screen and writes nothing.
        with self.connect(sandbox_id, timeout=WARMUP_TIMEOUT_S) as client:
            client.hello(timeout=WARMUP_TIMEOUT_S)
            client.call("screenshot", {}, timeout=WARMUP_TIMEOUT_S)
        container = self._guest(sandbox_id)
        with map_docker_errors(f"parking {sandbox_id} in pool {self.key}"):
            try:
                container.rename(marks.member_name(sandbox_id, self.key))
            except docker.errors.NotFound:
                raise SandboxNotFound(f"Docker sandbox {sandbox_id} is gone") from None


@dataclass(frozen=True)
class Member:
    """A guest container of a pool, as listed: ``ready`` (parked, unclaimed) or ``creating``."""

    sandbox_id: str
    container_id: str
    image_id: str
    state: str
    expires_at: float
    owner: L.Owner


def members(provider: DockerProvider, key: str | None = None) -> list[Member]:
    """The unclaimed, parked members of pool ``key`` (of every pool when None), running or not.
    A member with a claim marker is claimed, whatever its name still says (its claimer may have
    died before the rename: ``gc`` takes it then)."""
    pattern = rf"\.pool\.{key}$" if key else r"\.pool\.[0-9a-f]{12}$"
    parked = [m for m in (_member(row) for row in _rows(provider, pattern)) if m is not None]
    if not parked:
        return []
    with map_docker_errors("listing claim markers"):
        markers = provider.client.api.containers(
            all=True, filters={"label": [L.SANDBOX, f"{L.ROLE}={marks.CLAIM_ROLE}"]}
        )
    claimed = {str(row["Labels"].get(L.SANDBOX)) for row in markers}
    return [m for m in parked if m.sandbox_id not in claimed]


def creating_by(provider: DockerProvider, owners: set[tuple[int, int]]) -> list[str]:
    """Ids of sandboxes still being created by one of ``owners`` (pid, start ticks) here."""
    found = []
    for row in _rows(provider, rf"{CREATING_SUFFIX}$"):
        stamp = ownership.skip_malformed(f"container {row['Id'][:12]}", row["Labels"], "dk-")
        if (
            stamp is not None
            and stamp.local
            and (stamp.owner.pid, stamp.owner.start_ticks) in owners
        ):
            found.append(stamp.sandbox_id)
    return found


def _rows(provider: DockerProvider, name_pattern: str) -> list[dict[str, Any]]:
    with map_docker_errors("listing pool members"):
        rows: list[dict[str, Any]] = provider.client.api.containers(
            all=True,
            filters={"label": [L.SANDBOX, f"{L.ROLE}=guest"], "name": [name_pattern]},
        )
    return rows


def _member(row: dict[str, Any]) -> Member | None:
    stamp = ownership.skip_malformed(f"pool member {row['Id'][:12]}", row["Labels"], "dk-")
    if stamp is None:
        return None
    return Member(
        sandbox_id=stamp.sandbox_id,
        container_id=str(row["Id"]),
        image_id=str(row["ImageID"]),
        state=str(row["State"]),
        expires_at=stamp.expires_at,
        owner=stamp.owner,
    )


def take(provider: DockerProvider, member: Member, spec: SandboxSpec) -> bool:
    """The atomic claim: create ``member``'s claim marker, labelled with this process's stamp
    for ``spec`` (lifetime, ttl). False when another process claimed it first (the name is taken).
    """
    labels = L.create_labels(
        member.sandbox_id,
        "claim",
        owner=L.Owner.current(),
        ttl_s=spec.ttl_s,
        lifetime=ownership.lifetime_of(spec.detached),
        network=str(spec.network),
        screen=spec.screen,
    )
    api = provider.client.api
    with map_docker_errors(f"claiming {member.sandbox_id}"):
        try:
            api.create_container(
                member.image_id,
                name=marks.claim_marker_name(member.sandbox_id),
                command=["true"],
                labels=labels,
                network_disabled=True,
                host_config=api.create_host_config(network_mode="none"),
            )
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                return False
            raise
    return True


def claim(provider: DockerProvider, key: str, spec: SandboxSpec) -> SandboxInfo | None:
    """Claim a ready member of pool ``key`` for ``spec`` (its ttl and lifetime), or None when
    there is none. Two concurrent claims never get the same member (:func:`take`). The member
    is then renamed ``cubicle-<id>`` (cosmetic: the marker is the claim)."""
    now = time.time()
    candidates = [
        m
        for m in members(provider, key)
        if m.state == "running" and m.expires_at > now + CLAIM_MARGIN_S
    ]
    random.shuffle(candidates)  # concurrent claimers rarely collide
    for member in candidates:
        if not take(provider, member, spec):
            continue
        if not _rename(provider, member):
            provider.destroy(member.sandbox_id)  # removed meanwhile (a drain): our marker too
            continue
        info = provider.describe(member.sandbox_id)
        if info is not None and info.state == "running":
            return info
        provider.destroy(member.sandbox_id)
    return None


def _rename(provider: DockerProvider, member: Member) -> bool:
    """``cubicle-<id>.pool.<key>`` → ``cubicle-<id>``; False when the member is gone."""
    with map_docker_errors(f"renaming claimed {member.sandbox_id}"):
        try:
            provider.client.api.rename(
                member.container_id, guest_name(member.sandbox_id, ready=True)
            )
        except docker.errors.NotFound:
            return False
    return True
