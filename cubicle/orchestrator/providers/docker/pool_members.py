"""Warm-pool members on Docker (:class:`DockerPoolMembers`, the backend's
:class:`~cubicle.orchestrator.provider.PoolMembers`): the member provider, listing, the atomic claim
and what a drain needs (:mod:`cubicle.orchestrator.pool_marks` for the names).

A member is a guest container made by the normal create path of a provider with a pool key
(``DockerProvider(pool_key=KEY)``, :meth:`DockerPoolMembers.member_provider`): its
``mark_ready`` takes one warm-up screenshot (:func:`warm_up`), then renames the container to the
member's name ``cubicle-<id>.pool.<key>`` instead of ``cubicle-<id>``. A claim is the creation of
the member's claim marker ``cubicle-<id>-claim`` (the claimer's stamp): a second create conflicts
on the name.

This module never imports the provider (the provider imports it, for
:meth:`~cubicle.orchestrator.provider.Provider.pool_members`): it works through a
:class:`DockerHost`, the part of the provider it uses, and :mod:`.naming`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

import docker
import docker.errors

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import ownership
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.provider import (
    AgentStream,
    Claim,
    PoolMembers,
    Provider,
    SandboxInfo,
    SandboxSpec,
)
from cubicle.orchestrator.providers.docker.container_logs import log_config
from cubicle.orchestrator.providers.docker.engine import Engine
from cubicle.orchestrator.providers.docker.errors import map_docker_errors
from cubicle.orchestrator.providers.docker.naming import CREATING_SUFFIX, guest_info, guest_name
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError

__all__ = [
    "CLAIM_MARGIN_S",
    "EARLY_STREAM_UNUSED_S",
    "WARMUP_TIMEOUT_S",
    "DockerHost",
    "DockerPoolMembers",
    "Member",
    "warm_up",
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


class DockerHost(Protocol):
    """What :class:`DockerPoolMembers` needs of the Docker backend (``DockerProvider``
    implements it)."""

    @property
    def client(self) -> docker.DockerClient:
        """The connection to the engine new sandboxes go to (and members are listed on)."""

    @property
    def engine(self) -> Engine:
        """That engine."""

    def engine_of(self, sandbox_id: str) -> Engine:
        """The engine ``sandbox_id`` lives on."""

    def open_stream_in(
        self,
        container_id: str,
        sandbox_id: str,
        *,
        timeout: float,
        first_within_s: float | None = None,
    ) -> AgentStream:
        """A bridge to the agent of guest container ``container_id``, touching nothing until
        spoken to (ending by itself after ``first_within_s`` unused)."""

    def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything created for it."""


def warm_up(provider: Provider, sandbox_id: str) -> None:
    """This backend's member warm-up (:func:`cubicle.orchestrator.pool_marks.warm_up`) with its
    :data:`WARMUP_TIMEOUT_S`."""
    marks.warm_up(provider, sandbox_id, timeout_s=WARMUP_TIMEOUT_S)


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


class DockerPoolMembers(PoolMembers[Member]):
    """Warm-pool members on the engine of ``provider`` (``DockerProvider.pool_members`` makes
    it); ``member_provider`` makes that provider's twin with a pool key."""

    def __init__(self, provider: DockerHost, member_provider: Callable[[str], Provider]) -> None:
        self.provider = provider
        self._member_provider = member_provider

    def engine(self) -> str:
        """The engine's URL (part of a pool's shape: a pool's members all run on one engine)."""
        return str(self.provider.engine)

    def member_provider(self, key: str) -> Provider:
        """A provider on the same engine whose ready mark is the member name
        ``cubicle-<id>.pool.<key>`` (set once, after a warm-up screenshot: :func:`warm_up`)
        instead of ``cubicle-<id>``."""
        return self._member_provider(key)

    def members(self, key: str | None = None) -> list[Member]:
        """The unclaimed, parked members of pool ``key`` (of every pool when None), running or
        not. A member with a claim marker is claimed, whatever its name still says (its claimer
        may have died before the rename: ``gc`` takes it then)."""
        provider = self.provider
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

    def creating_by(self, owners: set[tuple[int, int]]) -> list[str]:
        """Ids of sandboxes still being created by one of ``owners`` (pid, start ticks) here."""
        found = []
        for row in _rows(self.provider, rf"{CREATING_SUFFIX}$"):
            stamp = ownership.skip_malformed(f"container {row['Id'][:12]}", row["Labels"], "dk-")
            if (
                stamp is not None
                and stamp.local
                and (stamp.owner.pid, stamp.owner.start_ticks) in owners
            ):
                found.append(stamp.sandbox_id)
        return found

    def take(self, member: Member, spec: SandboxSpec) -> bool:
        """The atomic claim: create ``member``'s claim marker, labelled with this process's stamp
        for ``spec`` (lifetime, ttl). False when another process claimed it first (the name is
        taken)."""
        return _take(self.provider, member, marks.claim_labels(member.sandbox_id, spec))

    def claim(self, key: str, spec: SandboxSpec) -> Claim | None:
        """Claim a ready member of pool ``key`` for ``spec`` (its ttl and lifetime), with an
        agent connection (hello done), or None when there is none. Two concurrent claims never
        get the same member (:meth:`take`). The member is then renamed ``cubicle-<id>``
        (cosmetic: the marker is the claim)."""
        return marks.claim_first(self.members(key), functools.partial(self.claim_member, spec=spec))

    def claim_member(self, member: Member, spec: SandboxSpec) -> Claim | None:
        """Claim ``member`` (:meth:`take`) and connect to its agent, or None: another claimer
        won, or the member is gone or broken (then removed: it is ours, and no one else's to
        use).

        The agent connection (a ``docker exec`` of the bridge, the slowest step) is opened on a
        thread while the marker is created; the bridge touches the agent only once spoken to,
        and nothing is said on it before the claim is won. A lost claim (or an error) closes it
        unused as soon as it is open: nothing of this claimer stays in the member. Once won, the
        rename runs beside the hello, and the info is made from what the listing and the marker
        say (the hello proves the member runs)."""
        provider = self.provider
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
            log.warning(
                "claimed member %s does not answer (%s); removing it", member.sandbox_id, exc
            )
            info = None
        except BaseException:
            _give_up(provider, member, stream, client, renamed)
            raise
        if info is not None and client is not None:
            return Claim(info, client)
        _give_up(provider, member, stream, client, renamed)  # gone (a drain removed it) or broken
        return None


def _rows(provider: DockerHost, name_pattern: str) -> list[dict[str, Any]]:
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


def _take(provider: DockerHost, member: Member, labels: dict[str, str]) -> bool:
    api = provider.client.api
    with map_docker_errors(f"claiming {member.sandbox_id}"):
        try:
            api.create_container(
                member.image_id,
                name=marks.claim_marker_name(member.sandbox_id),
                command=["true"],
                labels=labels,
                network_disabled=True,
                host_config=api.create_host_config(network_mode="none", log_config=log_config()),
            )
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                return False
            raise
    return True


def _give_up(
    provider: DockerHost,
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
    provider: DockerHost, member: Member, labels: dict[str, str]
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


def _rename(provider: DockerHost, member: Member) -> bool:
    """``cubicle-<id>.pool.<key>`` → ``cubicle-<id>``; False when the member is gone."""
    with map_docker_errors(f"renaming claimed {member.sandbox_id}"):
        try:
            provider.client.api.rename(
                member.container_id, guest_name(member.sandbox_id, ready=True)
            )
        except docker.errors.NotFound:
            return False
    return True
