"""Pool members on Docker: the member provider (its ready mark is the pool name), listing, the
atomic claim and the drain (:mod:`cubicle.orchestrator.pool_marks` for the names).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import docker.errors

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import ownership
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.claims import Claim
from cubicle.orchestrator.pool.choose import claim_first
from cubicle.orchestrator.provider import AgentStream, SandboxInfo, SandboxSpec
from cubicle.orchestrator.providers.docker.errors import map_docker_errors
from cubicle.orchestrator.providers.docker.provider import (
    CREATING_SUFFIX,
    DockerProvider,
    guest_info,
    guest_name,
)
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError

__all__ = [
    "CLAIM_MARGIN_S",
    "Member",
    "PoolMemberProvider",
    "claim",
    "claim_member",
    "creating_by",
    "members",
    "take",
]

CLAIM_MARGIN_S: Final = marks.CLAIM_MARGIN_S
WARMUP_TIMEOUT_S: Final = 30.0
CONNECT_S: Final = 10.0
"""How long a claimed member's bridge waits for its agent (a ready member's listens already)."""
HELLO_TIMEOUT_S: Final = 10.0
EARLY_STREAM_UNUSED_S: Final = 30.0
"""A claim's early stream (opened while the claim is taken) ends by itself when not spoken to
this long: a won claim speaks within its take (milliseconds; seconds on a loaded engine), and a
lost one closes it unused, a close Docker's exec can lose (the bridge would wait for ever)."""

log = logging.getLogger(__name__)
T = TypeVar("T")


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
        self._rename_creating(sandbox_id, marks.member_name(sandbox_id, self.key))


@dataclass(frozen=True)
class Member:
    """A guest container of a pool, as listed: ``ready`` (parked, unclaimed) or ``creating``."""

    sandbox_id: str
    container_id: str
    image_id: str
    state: str
    expires_at: float
    owner: L.Owner
    labels: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    image: str = ""
    """The image reference it was created from (``cubicle ls`` shows it)."""


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
        labels=dict(row["Labels"]),
        image=str(row["Image"]),
    )


def take(provider: DockerProvider, member: Member, spec: SandboxSpec) -> bool:
    """The atomic claim: create ``member``'s claim marker, labelled with this process's stamp
    for ``spec`` (lifetime, ttl). False when another process claimed it first (the name is taken).
    """
    return _take(provider, member, marks.claim_labels(member.sandbox_id, spec))


def _take(provider: DockerProvider, member: Member, labels: dict[str, str]) -> bool:
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


def claim(provider: DockerProvider, key: str, spec: SandboxSpec) -> Claim | None:
    """Claim a ready member of pool ``key`` for ``spec`` (its ttl and lifetime), with an agent
    connection (hello done), or None when there is none. Two concurrent claims never get the
    same member (:func:`take`). The member is then renamed ``cubicle-<id>`` (cosmetic: the
    marker is the claim)."""
    return claim_first(members(provider, key), functools.partial(claim_member, provider, spec=spec))


def claim_member(provider: DockerProvider, member: Member, spec: SandboxSpec) -> Claim | None:
    """Claim ``member`` (:func:`take`) and connect to its agent, or None: another claimer won,
    or the member is gone or broken (then removed: it is ours, and no one else's to use).

    The agent connection (a ``docker exec`` of the bridge, the slowest step) is opened on a
    thread while the marker is created; the bridge touches the agent only once spoken to, and
    nothing is said on it before the claim is won. A lost claim (or an error) closes it unused
    as soon as it is open: nothing of this claimer stays in the member. Once won, the rename
    runs beside the hello, and the info is made from what the listing and the marker say (the
    hello proves the member runs)."""
    labels = marks.claim_labels(member.sandbox_id, spec)
    stream = _background(
        provider.open_stream_in,
        member.container_id,
        member.sandbox_id,
        timeout=CONNECT_S,
        first_within_s=EARLY_STREAM_UNUSED_S,
    )
    try:
        won = _take(provider, member, labels)
    except BaseException:
        _discard(stream)
        raise
    if not won:
        _discard(stream)
        return None
    renamed = _background(_rename, provider, member)
    client: AgentClient | None = None
    try:
        opened = stream.result()
        client = AgentClient(opened.sock, name=opened.name, codec=opened.codec)
        client.hello(timeout=HELLO_TIMEOUT_S)
        info = _claimed_info(provider, member, labels) if renamed.result() else None
    except CubicleError as exc:
        log.warning("claimed member %s does not answer (%s); removing it", member.sandbox_id, exc)
        info = None
    except BaseException:
        _give_up(provider, member, stream, client, renamed)
        raise
    if info is not None and client is not None:
        return Claim(info, client)
    _give_up(provider, member, stream, client, renamed)  # gone (a drain removed it) or broken
    return None


def _give_up(
    provider: DockerProvider,
    member: Member,
    stream: Future[AgentStream],
    client: AgentClient | None,
    renamed: Future[bool],
) -> None:
    """Close what a won claim opened and remove the member (it is ours; no one else's to use)."""
    _discard(stream)
    if client is not None:
        client.close()
    wait([renamed])
    provider.destroy(member.sandbox_id)


def _claimed_info(
    provider: DockerProvider, member: Member, labels: dict[str, str]
) -> SandboxInfo | None:
    return guest_info(
        member.labels,
        name=guest_name(member.sandbox_id, ready=True),
        state="running",
        image=member.image,
        engine=str(provider.engine_of(member.sandbox_id)),
        described=f"pool member {member.container_id[:12]}",
        claim=(f"claim marker of {member.sandbox_id}", labels),
    )


def _background(call: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``call`` running on a thread of its own (never joined here: read the future)."""
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cubicle-claim")
    try:
        return worker.submit(call, *args, **kwargs)
    finally:
        worker.shutdown(wait=False)


def _discard(stream: Future[AgentStream]) -> None:
    """Close ``stream``'s socket once it is open (now, or when the opener finishes), unused;
    an opener that failed leaves nothing to close."""

    def close(done: Future[AgentStream]) -> None:
        if not done.cancelled() and done.exception() is None:
            done.result().sock.close()

    stream.add_done_callback(close)


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
