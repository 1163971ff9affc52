"""The Docker backend: one hardened container per sandbox, its agent reached over ``docker exec``.

Architecture (one sandbox ``dk-<10 hex>``):

- **guest container** ``cubicle-dk-…`` from ``cubicle-guest:<content hash>``: runs as uid 1000
  (``cubicle``) under docker-init, ``cap_drop=ALL``, ``no-new-privileges``, the seccomp profile
  of :mod:`cubicle.orchestrator.providers.docker.seccomp` (Docker's default plus what Chromium's own
  sandbox needs: user namespaces, chroot), read-only root fs with size-capped tmpfs on ``/tmp``,
  ``/home/cubicle``, ``/run`` and ``/run/cubicle``, the desktop user's ``/tests``, ``/solution``
  and ``/logs`` (Harbor task folders, :mod:`cubicle.orchestrator.harbor`), and ``/dev/shm`` of
  :data:`SHM_SIZE` for chromium, memory/CPU/pids limits from the :class:`SandboxSpec` (default
  CPU limit: one core, ``CUBICLE_CPUS``). No host folder is mounted: nothing the guest writes
  lands on the host. Its supervisor (images/desktop/supervisor.py) starts Xvfb at
  ``CUBICLE_SCREEN``, openbox, the panel and the agent, which listens on
  ``/run/cubicle/agent.sock`` *inside* the container.
- **agent transport**: every connection is a ``docker exec`` of the stdio bridge
  (:mod:`cubicle_guest.bridge`) through the engine's API; its stdin/stdout carry the protocol
  (:mod:`cubicle.orchestrator.providers.docker.exec`). No TCP port, no host socket path: the host
  never follows a path the guest could change.
- **engine**: local or remote (``tcp://`` with TLS, ``ssh://``; :mod:`.docker_engine`): nothing
  here needs a filesystem shared with the engine — the seccomp profile and the proxy's
  allowlist travel in the container configuration, images over the API (``image push``), the
  agent over the exec stream (relayed for TLS and ssh, :mod:`.docker_relay`). The creating
  host's book leads a sandbox id to its engine.
- **network**: :mod:`cubicle.orchestrator.providers.docker.network` (none / allow via an
egress-proxy
  container on an internal network / open).
- **labels**: every object carries :func:`cubicle.orchestrator.labels.create_labels`; ``list``,
``gc``
  and ``destroy`` find objects by label only.
- **ownership** (:mod:`cubicle.orchestrator.ownership`): the guest container is created as
  ``cubicle-<id>-creating`` and renamed ``cubicle-<id>`` by :meth:`DockerProvider.mark_ready` —
  the ready mark. ``gc`` judges each sandbox on its own (owner, then a fresh read of that name)
  and removes a doomed one with :meth:`DockerProvider.destroy`, whose per-sandbox steps are
  :meth:`DockerProvider.cleanup_steps`.

Exec goes through the agent's ``exec`` op (runs as the desktop user, bounded by a timeout);
:meth:`DockerProvider.docker_exec` (``docker exec``) is for diagnostics when the agent is down.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Final
from urllib.parse import urlsplit

import docker
import docker.errors
import docker.models.containers

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import ownership
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.errors import (
    ConfigError,
    ImageMissing,
    OrchestratorError,
    ProviderError,
    SandboxNotFound,
)
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import (
    AgentStream,
    DoctorCheck,
    ExecResult,
    Progress,
    Provider,
    SandboxInfo,
    SandboxSpec,
)
from cubicle.orchestrator.providers.docker import image as docker_image
from cubicle.orchestrator.providers.docker.container_logs import log_config
from cubicle.orchestrator.providers.docker.engine import (
    Engine,
    EngineBook,
    connect,
    default_engine,
    explicit_engine,
)
from cubicle.orchestrator.providers.docker.errors import ENGINE_HINT, map_docker_errors
from cubicle.orchestrator.providers.docker.exec import (
    DockerStreamCodec,
    bridge_argv,
    open_exec_socket,
)
from cubicle.orchestrator.providers.docker.naming import (
    BACKEND,
    CREATING_SUFFIX,
    ID_PREFIX,
    guest_info,
    guest_name,
)
from cubicle.orchestrator.providers.docker.network import (
    CONTROL_SOCKET,
    EGRESS_PYTHON,
    EGRESS_SCRIPT,
    EGRESS_USER,
    setup_network,
)
from cubicle.orchestrator.providers.docker.pool_members import DockerPoolMembers, warm_up
from cubicle.orchestrator.providers.docker.seccomp import guest_profile
from cubicle_guest.client import AgentConnectionError
from cubicle_guest.waiting import Deadline, poll

__all__ = ["GUEST_UID", "DockerProvider"]

IMAGE_ENV: Final = "CUBICLE_DOCKER_IMAGE"
"""Environment variable pinning the guest image (the test suite pins the one it built)."""
GUEST_UID: Final = 1000
GUEST_PYTHON: Final = "/opt/cubicle/venv/bin/python"
AGENT_SOCKET: Final = "/run/cubicle/agent.sock"
"""Where the agent listens, inside the container (images/desktop/supervisor.py)."""
SHM_SIZE: Final = "512m"
TMPFS: Final = {
    "/tmp": "rw,nosuid,nodev,size=512m,mode=1777",
    "/home/cubicle": f"rw,nosuid,nodev,size=512m,uid={GUEST_UID},gid={GUEST_UID},mode=0755",
    "/run": "rw,nosuid,nodev,noexec,size=16m,mode=0755",
    "/run/cubicle": f"rw,nosuid,nodev,noexec,size=1m,uid={GUEST_UID},gid={GUEST_UID},mode=0700",
    # a Harbor task's folders (cubicle/orchestrator/harbor.py): its tests/ and solution/ are
    # uploaded here and test.sh writes its reward under /logs/verifier, as Harbor has them
    **{
        folder: f"rw,nosuid,nodev,size=64m,uid={GUEST_UID},gid={GUEST_UID},mode=0755"
        for folder in ("/tests", "/solution", "/logs")
    },
}
STOP_TIMEOUT_S: Final = 2
BRIDGE_WAIT_SHARE: Final = 0.75

log = logging.getLogger(__name__)


def _describe(container: docker.models.containers.Container) -> str:
    return f"Docker container {container.name} ({str(container.id)[:12]})"


def _info(
    container: docker.models.containers.Container, engine: str, claim: Any = None
) -> SandboxInfo | None:
    """The sandbox of a guest container on ``engine`` (and of its warm-pool claim marker, if any:
    the claim's stamp counts, :mod:`cubicle.orchestrator.pool_marks`), or None (with a warning
    naming it) if its labels do not parse."""
    return guest_info(
        container.labels,
        name=str(container.name),
        state=str(container.status),
        image=str(container.attrs["Config"]["Image"]),
        engine=engine,
        described=_describe(container),
        claim=(_describe(claim), claim.labels) if claim else None,
    )


class DockerProvider(Provider):
    """Sandboxes as Docker containers on a Docker engine, local or remote
    (:mod:`cubicle.orchestrator.providers.docker.engine`).

    New sandboxes go to the explicit engine (``--engine`` / ``CUBICLE_DOCKER_HOST``), else the
    default one (``DOCKER_HOST`` or the local socket); an existing sandbox is found on its
    engine through the creating host's :class:`EngineBook`. ``list`` and ``gc`` cover every
    engine this host knows. Pass ``engine`` (or ``client``, a connection of your own) to work
    on one engine only. With ``pool_key`` it makes members of that warm pool
    (:meth:`mark_ready`; :meth:`pool_members` gives such a provider).

    Instances are cheap: engine connections are made on first use and shared by every instance
    of the process (closed at exit). The caller of :meth:`create` owns the sandbox and removes
    it with :meth:`destroy`.
    """

    name: ClassVar[str] = BACKEND

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        engine: Engine | None = None,
        book: EngineBook | None = None,
        pool_key: str | None = None,
    ) -> None:
        self._client = client
        self._given = engine
        self._book = book or EngineBook()
        self.pool_key = pool_key
        """Set: this provider makes members of that warm pool (:meth:`mark_ready`)."""
        self._guest_ids: dict[str, str] = {}
        """Guest container ids of the sandboxes this instance created (container ids never
        change): their connections need no look-up."""

    @property
    def _engine(self) -> Engine | None:
        """The one engine this provider works on, if any: given, else ``--engine`` /
        ``CUBICLE_DOCKER_HOST`` (read at use, so a bad URL fails the command that uses it).

        :raises ConfigError: the named engine's URL is not usable.
        """
        return self._given if self._given is not None else explicit_engine()

    # -- engine ------------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """Where new sandboxes go: this provider's engine, else the default one."""
        return self._engine or default_engine()

    @property
    def client(self) -> docker.DockerClient:
        """The connection to :attr:`engine` (made lazily).

        :raises EngineUnavailable: the engine does not answer.
        """
        return self._client or connect(self.engine)

    def engine_of(self, sandbox_id: str) -> Engine:
        """The engine ``sandbox_id`` lives on: this provider's, else the book's, else the
        default (see :mod:`cubicle.orchestrator.providers.docker.engine`)."""
        if self._engine is not None:
            return self._engine
        entry = self._book.lookup(sandbox_id)
        return entry.engine_of() if entry is not None else default_engine()

    def client_of(self, sandbox_id: str) -> docker.DockerClient:
        """The connection to the engine ``sandbox_id`` lives on."""
        return self._client or connect(self.engine_of(sandbox_id))

    def engines(self) -> builtins.list[Engine]:
        """Every engine ``list`` and ``gc`` cover: this provider's one, else the default engine
        and every engine of the book."""
        if self._engine is not None:
            return [self._engine]
        known = [default_engine()]
        known += [engine for engine in self._book.engines() if engine not in known]
        return known

    def _bound(self) -> builtins.list[DockerProvider]:
        """One provider per engine of :meth:`engines` (this one when it has a client)."""
        if self._client is not None:
            return [self]
        return [DockerProvider(engine=engine, book=self._book) for engine in self.engines()]

    def _containers(self, sandbox_id: str | None = None, role: str | None = None) -> list[Any]:
        filters = [f"{L.SANDBOX}={sandbox_id}" if sandbox_id else L.SANDBOX]
        if role:
            filters.append(f"{L.ROLE}={role}")
        client = self.client_of(sandbox_id) if sandbox_id else self.client
        with map_docker_errors("listing cubicle containers"):
            # a container removed meanwhile (a concurrent destroy or gc) is not an error
            return list(
                client.containers.list(all=True, filters={"label": filters}, ignore_removed=True)
            )

    def _guest(self, sandbox_id: str) -> docker.models.containers.Container:
        found = self._containers(sandbox_id, "guest")
        if not found:
            raise SandboxNotFound(
                f"no Docker sandbox {sandbox_id!r} on the engine {self.engine_of(sandbox_id)}",
                hint="list sandboxes with: cubicle ls (another host's sandbox: --engine URL)",
            )
        container: docker.models.containers.Container = found[0]
        return container

    # -- Provider ----------------------------------------------------------------------------

    def doctor(self) -> list[DoctorCheck]:
        checks: list[DoctorCheck] = []
        try:
            with map_docker_errors("pinging the engine"):
                version = self.client.version()
        except Exception as exc:  # doctor never raises: it reports
            return [
                DoctorCheck("docker engine", False, str(exc), getattr(exc, "hint", ENGINE_HINT))
            ]
        checks.append(
            DoctorCheck(
                "docker engine",
                True,
                f"Docker {version.get('Version', '?')} answers at {self.engine}",
            )
        )
        try:
            ref = docker_image.current_image_ref(self.client)
            checks.append(DoctorCheck("docker image", True, f"{ref} present"))
        except Exception as exc:
            checks.append(DoctorCheck("docker image", False, str(exc), getattr(exc, "hint", None)))
        checks.append(
            DoctorCheck("agent transport", True, "docker exec stream (no host folder or socket)")
        )
        return checks

    def build_image(self, *, progress: Progress, force: bool = False) -> str:
        return docker_image.build_image(self.client, progress=progress, force=force)

    def push_image(self, *, progress: Progress) -> str:
        """Send the guest image (``CUBICLE_DOCKER_IMAGE``, else the current sources' image on the
        default engine) to this provider's engine (:func:`.docker_image.push_image`).

        :raises ConfigError: no other engine is named (``--engine`` / ``CUBICLE_DOCKER_HOST``).
        """
        source_engine = default_engine()
        if self._engine is None or self._engine == source_engine:
            raise ConfigError(
                f"image push needs a target engine other than the one the image is on "
                f"({source_engine})",
                hint="cubicle image push --engine tcp://HOST:2376 (or ssh://USER@HOST)",
            )
        source = connect(source_engine)
        ref = os.environ.get(IMAGE_ENV) or docker_image.current_image_ref(source)
        return docker_image.push_image(
            source, self.client, ref, progress=progress, target_name=str(self._engine)
        )

    def default_image(self) -> str:
        """``CUBICLE_DOCKER_IMAGE`` if set (must exist), else the image of the current sources.

        :raises ImageMissing: naming the image and how to build it.
        """
        pinned = os.environ.get(IMAGE_ENV)
        if not pinned:
            try:
                return docker_image.current_image_ref(self.client)
            except ImageMissing as exc:
                if self._client is not None or self.engine.is_local:
                    raise
                raise ImageMissing(
                    f"{exc} on the engine {self.engine}",
                    hint=f"send it there with: cubicle image push --engine {self.engine}",
                ) from exc
        with map_docker_errors(f"looking up {pinned} ({IMAGE_ENV})"):
            try:
                self.client.images.get(pinned)
            except docker.errors.ImageNotFound:
                raise ImageMissing(
                    f"the image {pinned} named by {IMAGE_ENV} does not exist",
                    hint=f"unset {IMAGE_ENV} or build it with: cubicle image build",
                ) from None
        return pinned

    def validate(self, spec: SandboxSpec) -> None:
        """Refuse a spec this engine cannot run (ConfigError: CPUs, screen, limits)."""
        _validate(spec, self._cpu_count())

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create and start the sandbox's network, proxy and guest container.

        Returns once the container runs; readiness (the agent's hello) is the caller's
        (:class:`cubicle.orchestrator.sandbox.Sandbox`). On any failure removes what it made and
        raises.

        """
        engine = self.engine
        self.validate(spec)
        image = spec.image or self.default_image()
        sandbox_id = ID_PREFIX + secrets.token_hex(5)
        if self._client is None:
            self._book.record(sandbox_id, engine)  # before anything exists on the engine
        labels = L.create_labels(
            sandbox_id,
            "guest",
            owner=L.Owner.current(),
            ttl_s=spec.ttl_s,
            lifetime=ownership.lifetime_of(spec.detached),
            network=str(spec.network),
            screen=spec.screen,
        )
        try:
            attach = setup_network(
                self.client, sandbox_id, spec.network, image=image, labels=labels
            )
            with map_docker_errors(f"creating the guest container of {sandbox_id}"):
                container = self.client.containers.create(
                    image,
                    name=guest_name(sandbox_id, ready=False),
                    hostname="cubicle",
                    labels=labels,
                    user=f"{GUEST_UID}:{GUEST_UID}",
                    environment={
                        "CUBICLE_SCREEN": f"{spec.screen[0]}x{spec.screen[1]}",
                        "CUBICLE_SANDBOX": sandbox_id,
                        **attach.environment,
                    },
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges", f"seccomp={guest_profile()}"],
                    read_only=True,
                    tmpfs=dict(TMPFS),
                    shm_size=SHM_SIZE,
                    mem_limit=f"{spec.memory_mb}m",
                    memswap_limit=f"{spec.memory_mb}m",
                    nano_cpus=int(spec.cpus * 1e9),
                    pids_limit=spec.pids_limit,
                    init=True,
                    log_config=log_config(),
                    **attach.create_kwargs,
                )
                container.start()
                container.reload()
            self._guest_ids[sandbox_id] = str(container.id)
            info = _info(container, str(engine))
            assert info is not None  # our own labels parse
            return info
        except BaseException:
            self.destroy(sandbox_id)
            raise

    def agent_takes_several_connections(self) -> bool:
        """Yes: each connection is its own ``docker exec``."""
        return True

    def keeps_spare_connection(self) -> bool:
        """Yes (each connection is its own exec), but not over ``ssh://``: there every agent
        connection and every pooled API connection is an SSH session, and sshd allows 10 per
        connection by default (``MaxSessions``); a held idle agent connection per sandbox made
        the engine's next API call fail ("Connect failed") once two sandboxes were up."""
        return urlsplit(self.engine.url).scheme != "ssh"

    def _cpu_count(self) -> int:
        """CPUs of the engine's machine (this host's for a local engine)."""
        if self._client is None and self.engine.is_local:
            return os.cpu_count() or 1
        with map_docker_errors(f"asking the engine {self.engine} for its CPU count"):
            return int(self.client.info().get("NCPU") or 1)

    def mark_ready(self, sandbox_id: str) -> None:
        """Rename the guest container ``cubicle-<id>-creating`` → ``cubicle-<id>`` (atomic). A
        provider of pool members (``pool_key``) takes one warm-up screenshot first
        (:func:`.pool_members.warm_up`) and renames it ``cubicle-<id>.pool.<key>`` instead, the
        member's ready mark (:mod:`cubicle.orchestrator.pool_marks`)."""
        if self.pool_key is None:
            self._rename_creating(sandbox_id, guest_name(sandbox_id, ready=True))
            return
        warm_up(self, sandbox_id)
        self._rename_creating(sandbox_id, marks.member_name(sandbox_id, self.pool_key))

    def pool_members(self) -> DockerPoolMembers:
        """Warm-pool members on this provider's engine (:mod:`.pool_members`)."""
        return DockerPoolMembers(self, self._member_provider)

    def _member_provider(self, key: str) -> DockerProvider:
        """A provider like this one (same engine, connection and book) that makes members of
        pool ``key``."""
        return DockerProvider(self._client, engine=self._given, book=self._book, pool_key=key)

    def _rename_creating(self, sandbox_id: str, name: str) -> None:
        """Rename the guest container ``cubicle-<id>-creating`` (by that name: one request) to
        ``name``, the ready mark.

        :raises SandboxNotFound: no such container (removed meanwhile).
        """
        _check_id(sandbox_id)
        with map_docker_errors(f"marking {sandbox_id} ready"):
            try:
                self.client_of(sandbox_id).api.rename(guest_name(sandbox_id, ready=False), name)
            except docker.errors.NotFound:
                raise SandboxNotFound(f"Docker sandbox {sandbox_id} is gone") from None

    def _ready(self, sandbox_id: str) -> bool:
        """A fresh read of the ready mark: the guest exists under its ready name."""
        return any(
            not str(c.name).endswith(CREATING_SUFFIX) for c in self._containers(sandbox_id, "guest")
        )

    def open_stream(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        """A ``docker exec`` of the bridge to the agent (:mod:`.docker_exec`). The bridge waits
        for the agent to listen (a sandbox still starting) for most of ``timeout``, so that a
        caller's first request with the same deadline still hears why it gave up."""
        _check_id(sandbox_id)
        known = self._guest_ids.get(sandbox_id)
        if known is not None:
            try:
                return self.open_stream_in(known, sandbox_id, timeout=timeout)
            except AgentConnectionError:
                self._guest_ids.pop(sandbox_id, None)  # removed by someone else: look it up
        return self.open_stream_in(str(self._guest(sandbox_id).id), sandbox_id, timeout=timeout)

    def open_stream_in(
        self,
        container_id: str,
        sandbox_id: str,
        *,
        timeout: float,
        first_within_s: float | None = None,
    ) -> AgentStream:
        """:meth:`open_stream` to the guest container ``container_id`` (known to be
        ``sandbox_id``'s: a warm-pool claim listed it), without looking it up.

        The bridge says nothing and does not touch the agent until the first bytes are written:
        a stream opened and closed unused leaves the guest as it was. With ``first_within_s``
        the bridge also ends by itself when nothing is written that long (for a stream that
        may be closed unused: the engine can lose that close, :mod:`cubicle_guest.bridge`); without,
        it waits for its first bytes as long as the stream is open."""
        argv = bridge_argv(
            GUEST_PYTHON,
            AGENT_SOCKET,
            wait_s=timeout * BRIDGE_WAIT_SHARE,
            first_within_s=first_within_s,
        )
        sock = open_exec_socket(
            self.client_of(sandbox_id).api,
            container_id,
            argv,
            user=f"{GUEST_UID}:{GUEST_UID}",
            name=sandbox_id,
        )
        return AgentStream(sock, sandbox_id, DockerStreamCodec())

    def docker_exec(self, sandbox_id: str, argv: Sequence[str]) -> ExecResult:
        """Diagnostics only: ``docker exec`` ``argv`` as the desktop user (no agent needed)."""
        container = self._guest(sandbox_id)
        with map_docker_errors(f"docker exec in {sandbox_id}"):
            result = container.exec_run(list(argv), user=f"{GUEST_UID}:{GUEST_UID}", demux=True)
        stdout, stderr = result.output
        return ExecResult(result.exit_code, _text(stdout), _text(stderr))

    def logs(self, sandbox_id: str, *, tail: int = 50) -> str:
        container = self._guest(sandbox_id)
        with map_docker_errors(f"reading the logs of {sandbox_id}"):
            return bytes(container.logs(tail=tail)).decode("utf-8", "replace")

    def open_egress_control(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        """A ``docker exec`` of ``egress.pyz --relay`` in the proxy container: the host's only way
        to its control socket (a file in that container's private tmpfs)."""
        _check_id(sandbox_id)
        found = self._containers(sandbox_id, "egress")
        if not found:
            raise ProviderError(
                f"sandbox {sandbox_id} has no egress proxy (its network is not ask:)",
                hint="create it with --network ask:...",
            )
        argv = [EGRESS_PYTHON, "-I", EGRESS_SCRIPT, "--relay", CONTROL_SOCKET]
        sock = open_exec_socket(
            self.client.api, str(found[0].id), argv, user=EGRESS_USER, name=f"{sandbox_id} egress"
        )
        return AgentStream(sock, f"the egress proxy of {sandbox_id}", DockerStreamCodec())

    def egress_log(self, sandbox_id: str, *, tail: int | str = "all") -> str:
        """The egress proxy's decision log (JSON lines), ``""`` when the sandbox has no proxy."""
        found = self._containers(sandbox_id, "egress")
        if not found:
            return ""
        with map_docker_errors(f"reading the egress log of {sandbox_id}"):
            return bytes(found[0].logs(tail=tail)).decode("utf-8", "replace")

    def remove_objects(self, sandbox_id: str) -> None:
        """Run every per-sandbox clean-up step of :meth:`cleanup_steps` (idempotent)."""
        _check_id(sandbox_id)
        self._guest_ids.pop(sandbox_id, None)
        for step in self.cleanup_steps():
            step(sandbox_id)

    def cleanup_steps(self) -> builtins.list[Callable[[str], None]]:
        """What ``down`` and ``gc`` do to remove one sandbox, in order; each step is idempotent,
        finds its objects by the sandbox's label and is the place to add a new kind of object."""
        return [
            self._remove_containers,
            self._remove_networks,
            self._remove_volumes,
            self._book.forget,
        ]

    def _remove_containers(self, sandbox_id: str) -> None:
        for container in self._containers(sandbox_id):
            with map_docker_errors(f"removing {container.name}"):
                _remove_container(container)

    def _remove_networks(self, sandbox_id: str) -> None:
        with map_docker_errors(f"listing the networks of {sandbox_id}"):
            networks = self.client_of(sandbox_id).networks.list(
                filters={"label": f"{L.SANDBOX}={sandbox_id}"}
            )
        for network in networks:
            with (
                map_docker_errors(f"removing network {network.name}"),
                contextlib.suppress(docker.errors.NotFound),
            ):
                network.remove()

    def _remove_volumes(self, sandbox_id: str) -> None:
        with map_docker_errors(f"listing the volumes of {sandbox_id}"):
            volumes = self.client_of(sandbox_id).volumes.list(
                filters={"label": f"{L.SANDBOX}={sandbox_id}"}
            )
        for volume in volumes:
            with map_docker_errors(f"removing volume {volume.name}"):
                volume.remove(force=True)

    def list(self) -> list[SandboxInfo]:
        """Sandboxes on every engine of :meth:`engines`; an engine other than the first that
        does not answer is skipped with a warning naming it."""
        infos: builtins.list[SandboxInfo] = []
        for bound in self._each_engine("listing sandboxes"):
            where = str(bound.engine)
            containers = bound._containers()
            claims = {
                c.labels.get(L.SANDBOX): c for c in containers if _role(c) == marks.CLAIM_ROLE
            }
            found = (
                _info(c, where, claims.get(c.labels.get(L.SANDBOX)))
                for c in containers
                if _role(c) == "guest"
            )
            infos += (i for i in found if i is not None)
        return sorted(infos, key=lambda i: i.created_at)

    def _each_engine(self, doing: str) -> Iterator[DockerProvider]:
        """:meth:`_bound` providers; an unreachable engine raises only when it is the first
        (the one commands are about), the others are skipped with a warning."""
        for index, bound in enumerate(self._bound()):
            try:
                with map_docker_errors(f"{doing} on the engine {bound.engine}"):
                    bound.client.ping()
            except OrchestratorError as exc:
                if index == 0:
                    raise
                log.warning("%s: skipping the engine %s (%s)", doing, bound.engine, exc)
                continue
            yield bound

    def _stamps(self) -> dict[str, ownership.Stamp]:
        """One stamp per sandbox id that has any labelled object (container, network, volume);
        objects whose labels do not parse are skipped with a warning naming them."""
        objects: builtins.list[tuple[str, dict[str, str]]] = [
            (_describe(c), c.labels) for c in self._containers()
        ]
        with map_docker_errors("listing cubicle networks and volumes"):
            for network in self.client.networks.list(filters={"label": L.SANDBOX}):
                labels = network.attrs.get("Labels") or {}
                objects.append((f"Docker network {network.name}", labels))
            for volume in self.client.volumes.list(filters={"label": L.SANDBOX}):
                labels = volume.attrs.get("Labels") or {}
                objects.append((f"Docker volume {volume.name}", labels))
        return marks.effective_stamps(objects, ID_PREFIX)

    def gc_scopes(self) -> Iterator[DockerProvider]:
        """One provider per engine of :meth:`engines` (:meth:`_each_engine`: an unreachable
        engine other than the first is skipped with a warning), so that :meth:`Provider.gc`
        removes each doomed sandbox on the engine it was found on."""
        return self._each_engine("gc")

    def doomed(self) -> Iterator[tuple[str, str]]:
        """On :attr:`engine` (:meth:`gc_scopes` gives one provider per engine): judge each sandbox
        on its own (:func:`cubicle.orchestrator.ownership.verdict`), the owner first, then a fresh
        read of the ready mark; a doomed one is judged again on its warm-pool claim marker read
        fresh (a claim may have landed since the listing). Never a sweep of whatever an earlier
        listing did not show. Once every doomed sandbox is removed, drops the book entries of this
        engine whose sandbox left nothing on it and whose creator is gone."""
        stamps = self._stamps()
        for sandbox_id, stamp in sorted(stamps.items()):
            ready = functools.partial(self._ready, sandbox_id)
            reason = ownership.verdict(stamp, ready, time.time())
            if reason is not None:
                fresh = marks.effective_stamps(
                    [(_describe(c), c.labels) for c in self._containers(sandbox_id)], ID_PREFIX
                ).get(sandbox_id, stamp)
                if fresh != stamp:
                    reason = ownership.verdict(fresh, ready, time.time())
            if reason is not None:
                yield sandbox_id, f"{reason}; engine {self.engine}"
        if self._client is None:
            self._forget_vanished(set(stamps))

    def _forget_vanished(self, present: set[str]) -> None:
        """Drop this engine's book entries with no object on it and no live creator (a creator
        still alive may be about to create them)."""
        for entry in self._book.entries():
            if (
                entry.engine_of() == self.engine
                and entry.sandbox_id not in present
                and entry.owner_gone()
                and not self._containers(entry.sandbox_id)
            ):
                self._book.forget(entry.sandbox_id)

    def describe(self, sandbox_id: str) -> SandboxInfo | None:
        found = self._containers(sandbox_id)
        guests = [c for c in found if _role(c) == "guest"]
        claims = [c for c in found if _role(c) == marks.CLAIM_ROLE]
        if not guests:
            return None
        return _info(guests[0], str(self.engine_of(sandbox_id)), claims[0] if claims else None)


def _role(container: docker.models.containers.Container) -> str:
    return str(container.labels.get(L.ROLE, ""))


def _text(data: object) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else ""


def _check_id(sandbox_id: str) -> None:
    body = sandbox_id[len(ID_PREFIX) :]
    if (
        not sandbox_id.startswith(ID_PREFIX)
        or not body
        or not all(c in "0123456789abcdef" for c in body)
    ):
        raise SandboxNotFound(
            f"{sandbox_id!r} is not a Docker sandbox id (dk- followed by hex digits)",
            hint="list sandboxes with: cubicle ls",
        )


def _validate(spec: SandboxSpec, cpus: int) -> None:
    width, height = spec.screen
    if not (320 <= width <= 7680 and 200 <= height <= 4320):
        raise ConfigError(f"screen {width}x{height} is outside 320x200 .. 7680x4320 pixels")
    if not spec.ttl_s > 0:
        raise ConfigError(f"ttl must be positive seconds, got {spec.ttl_s}")
    if spec.memory_mb < 256:
        raise ConfigError(f"memory {spec.memory_mb} MiB is below the 256 MiB a desktop needs")
    if not 0.1 <= spec.cpus <= cpus:
        raise ConfigError(f"cpus {spec.cpus} is outside 0.1 .. {cpus} (the engine's CPU count)")
    if not isinstance(spec.network, NetworkPolicy):
        raise ConfigError(f"network must be a NetworkPolicy, got {type(spec.network).__name__}")
    if spec.image is not None and not spec.image:
        raise ImageMissing("empty image reference in SandboxSpec")


def _remove_container(
    container: docker.models.containers.Container, *, wait_s: float = 30.0
) -> None:
    """Force-remove ``container``; gone already, or being removed by someone else, is success.

    A concurrent removal (another ``destroy`` or ``gc``) makes the engine answer 409 "removal
    already in progress"; then wait up to ``wait_s`` seconds for it to finish so that the
    networks the container used can be removed next.
    """
    try:
        container.remove(force=True, v=True)
        return
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if exc.status_code != 409 or "in progress" not in str(exc):
            raise
    for _ in poll(Deadline(wait_s), 0.1):
        try:
            container.reload()
        except docker.errors.NotFound:
            return
    raise ProviderError(
        f"container {container.name} was still being removed by another process after {wait_s} s"
    )
