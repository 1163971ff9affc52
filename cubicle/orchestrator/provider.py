"""The provider interface every sandbox backend implements (Docker, libvirt VM, ...).

A provider turns a :class:`SandboxSpec` into a running guest whose agent is reachable, and
removes it again. It knows nothing about models or drivers;
:class:`cubicle.orchestrator.sandbox.Sandbox` adds the lifecycle (readiness, signals, ``with``) on
top of it.

Ownership (:mod:`cubicle.orchestrator.ownership`): everything a provider creates for a sandbox
(container/domain, networks, proxies, firewall rules, run folders) carries the sandbox's stamp —
the creating process (pid + host), the lifetime and the expiry — and :meth:`Provider.destroy`
removes all of it. A sandbox is *creating* until :meth:`Provider.mark_ready`; :meth:`Provider.gc`
decides sandbox by sandbox with :func:`cubicle.orchestrator.ownership.verdict` and never takes one
a live process is creating.

To add a provider: write a subpackage ``cubicle/orchestrator/providers/<name>/`` whose
``provider.py`` subclasses :class:`Provider`, set ``name``, implement the abstract methods, and
register it in
:data:`cubicle.orchestrator.providers.PROVIDERS`. What every backend shares is here, not in the
subclasses: :meth:`Provider.exec` (the agent's ``exec`` op), :meth:`Provider.egress_log` (none by
default), :meth:`SandboxInfo.from_labels` (labels → info) and :func:`parse_size`.

Warm pools (:mod:`cubicle.orchestrator.pool`) reach a backend's pool members only through
:meth:`Provider.pool_members`: a :class:`PoolMembers` (the member provider, the listing of members
as :class:`PoolMember`, the atomic claim, what a drain needs), implemented by each backend with
pools in its subpackage (``providers/<name>/pool_members.py``); a backend without pools inherits
the default, which refuses. A won claim is a :class:`Claim`. The pool package imports no backend.
"""

from __future__ import annotations

import abc
import builtins
import functools
import logging
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Protocol, TypeVar

import anyio
import anyio.to_thread

from cubicle.drivers.async_client import AsyncAgentClient
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ConfigError, ProviderError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.resume_marks import clear_mark
from cubicle.orchestrator.view_servers import stop_view_servers
from cubicle_guest.client import AgentClient, StreamCodec

if TYPE_CHECKING:
    from cubicle.orchestrator.ownership import Stamp


__all__ = [
    "CPUS_ENV",
    "AgentStream",
    "Claim",
    "DoctorCheck",
    "ExecResult",
    "PoolMember",
    "PoolMembers",
    "Progress",
    "Provider",
    "SandboxInfo",
    "SandboxSpec",
    "default_cpus",
    "parse_size",
]

log = logging.getLogger(__name__)

CPUS_ENV: Final = "CUBICLE_CPUS"
"""Environment variable setting the default CPU limit of new sandboxes (cores, e.g. ``1.5``)."""
DEFAULT_CPUS: Final = 1.0
"""Default CPU limit (cores): one sandbox never takes the whole host, whatever runs in it."""


def default_cpus() -> float:
    """``CUBICLE_CPUS`` if set, else :data:`DEFAULT_CPUS` (1 core).

    :raises ConfigError: ``CUBICLE_CPUS`` is not a positive number.
    """
    raw = os.environ.get(CPUS_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_CPUS
    try:
        cpus = float(raw)
    except ValueError:
        cpus = float("nan")
    if not cpus > 0 or cpus == float("inf"):
        raise ConfigError(f"{CPUS_ENV}={raw!r} is not a positive number of cores (e.g. 1 or 1.5)")
    return cpus


EXEC_MARGIN_S: Final = 10.0
"""How much longer than the program's own timeout :meth:`Provider.exec` waits for the agent."""


def parse_size(text: str, what: str = "size") -> tuple[int, int]:
    """``WIDTHxHEIGHT`` (e.g. ``1280x800``, any case) as positive integers — the one parser of
    sizes (CLI options, the screen label).

    :raises ConfigError: naming ``what`` and the text.
    """
    width, sep, height = text.strip().lower().partition("x")
    if not (sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise ConfigError(f"{what} wants WIDTHxHEIGHT in pixels (e.g. 1280x800), got {text!r}")
    return int(width), int(height)


Progress = Callable[[str], None]
"""Receives one human-readable progress line at a time (image builds, slow starts)."""


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Sizes in pixels; memory in MiB; ttl in seconds."""

    screen: tuple[int, int] = (1280, 800)
    network: NetworkPolicy = field(default_factory=NetworkPolicy.none)
    ttl_s: float = 3600.0
    memory_mb: int = 2048
    cpus: float = field(default_factory=default_cpus)
    """CPU limit in cores (Docker: a CFS quota; VM: that many vCPUs, rounded up, once its desktop
    is up — a VM boots with at least two where the host has two CPUs, see
    ``cubicle.orchestrator.providers.vm.provider.BOOT_VCPUS``). Default :func:`default_cpus`: 1, or
    ``CUBICLE_CPUS``."""
    pids_limit: int = 1024
    """Most processes/threads the guest may have at once (a fork bomb stops there)."""
    image: str | None = None
    """Backend image reference; ``None`` means the provider's default (built) image."""
    detached: bool = False
    """``False``: the creating process owns the sandbox and ``gc`` removes it once that process is
    gone. ``True`` (``cubicle up``): the creating process owns it until it is ready
    (:meth:`Provider.mark_ready`); from then on only ``down`` or the expiry removes it."""


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the backend knows it (``cubicle ls``)."""

    id: str
    provider: str
    state: str
    created_at: float
    expires_at: float
    owner_pid: int
    owner_host: str
    network: str
    screen: tuple[int, int]
    detail: dict[str, str] = field(default_factory=dict)
    """Backend-specific facts shown by ``cubicle ls`` (accelerator, container name ...)."""
    ownership: str = "owned"
    """``creating``, ``owned`` or ``detached`` (:mod:`cubicle.orchestrator.ownership`)."""

    @classmethod
    def from_labels(
        cls,
        stamp: Stamp,
        labels: Mapping[str, str],
        *,
        provider: str,
        state: str,
        ready: bool,
        detail: dict[str, str],
    ) -> SandboxInfo:
        """The info of a sandbox from its parsed stamp and its labels
        (:mod:`cubicle.orchestrator.labels`); an unreadable screen label shows as ``0x0``."""
        try:
            screen = parse_size(labels.get(L.SCREEN, ""), L.SCREEN)
        except ConfigError:
            screen = (0, 0)
        return cls(
            id=stamp.sandbox_id,
            provider=provider,
            state=state,
            created_at=stamp.created_at,
            expires_at=stamp.expires_at,
            owner_pid=stamp.owner.pid,
            owner_host=stamp.owner.host,
            network=labels.get(L.NETWORK, ""),
            screen=screen,
            detail=detail,
            ownership=stamp.lifetime if ready else "creating",
        )


@dataclass(frozen=True)
class ExecResult:
    """What a program run in the guest did. Output is UTF-8 text (invalid bytes replaced); each
    stream is cut at :data:`cubicle_guest.protocol.MAX_EXEC_OUTPUT_BYTES` as sent, and
    ``*_truncated`` then says so — output is cut, never lost."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @classmethod
    def from_reply(cls, result: Mapping[str, Any]) -> ExecResult:
        """The result of the agent's ``exec`` operation (:mod:`cubicle_guest.protocol`)."""
        return cls(
            exit_code=result.get("exit_code"),
            stdout=str(result.get("stdout", "")),
            stderr=str(result.get("stderr", "")),
            timed_out=bool(result.get("timed_out", False)),
            stdout_truncated=bool(result.get("stdout_truncated", False)),
            stderr_truncated=bool(result.get("stderr_truncated", False)),
        )


@dataclass(frozen=True)
class AgentStream:
    """A connected byte stream to a sandbox's agent: the socket (owned by whoever takes it), how
    errors name the peer, and the carrier's framing around the agent's bytes (None: none)."""

    sock: socket.socket
    name: str
    codec: StreamCodec | None = None


@dataclass(frozen=True)
class DoctorCheck:
    """One line of ``cubicle doctor``: what was checked, whether it is fine, and the fix."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Claim:
    """A claimed sandbox: its info, and an agent connection the claimer already opened (hello
    done), or None. ``Sandbox.create`` hands that connection to the sandbox's first
    :meth:`~cubicle.orchestrator.sandbox.Sandbox.connect`; whoever holds the claim closes it.
    (Claimers: :mod:`cubicle.orchestrator.claims`.)"""

    info: SandboxInfo
    client: AgentClient | None = None


class PoolMember(Protocol):
    """What every backend's member listing (:meth:`PoolMembers.members`) says of a member."""

    @property
    def sandbox_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def expires_at(self) -> float: ...


MemberT = TypeVar("MemberT", bound=PoolMember)


class PoolMembers(abc.ABC, Generic[MemberT]):
    """One backend's warm-pool members (:mod:`cubicle.orchestrator.pool`), bound to one provider
    of that backend (:meth:`Provider.pool_members` makes it): making members, listing them, the
    atomic claim, and what a drain needs. Members are sandboxes of that provider, marked as
    members of one pool (:mod:`cubicle.orchestrator.pool_marks`); ``MemberT`` is the backend's
    listing of one."""

    def engine(self) -> str:
        """Where this backend's members run, part of a pool's shape: the Docker engine's URL;
        ``""`` (the default) for a backend with one place only."""
        return ""

    @abc.abstractmethod
    def member_provider(self, key: str) -> Provider:
        """A provider like the bound one whose :meth:`Provider.mark_ready` makes members of pool
        ``key``: once the agent answered, one warm-up screenshot (reads the screen, writes
        nothing), then the member's ready mark instead of the plain one."""

    @abc.abstractmethod
    def members(self, key: str | None = None) -> Sequence[MemberT]:
        """The unclaimed, parked members of pool ``key`` (of every pool when None), running or
        not."""

    @abc.abstractmethod
    def take(self, member: MemberT, spec: SandboxSpec) -> bool:
        """The atomic claim of ``member`` for ``spec`` (its lifetime and ttl), stamped with this
        process; False when another process claimed it first or it is gone."""

    @abc.abstractmethod
    def claim(self, key: str, spec: SandboxSpec) -> Claim | None:
        """Claim a ready member of pool ``key`` for ``spec``, with an agent connection (hello
        done), or None when there is none. Two concurrent claims never get the same member."""

    @abc.abstractmethod
    def creating_by(self, owners: set[tuple[int, int]]) -> list[str]:
        """Ids of sandboxes still being created here by one of ``owners`` (pid, start ticks):
        what a drain removes of the refillers it stopped."""


class Provider(abc.ABC):
    """A sandbox backend. Instances are cheap; connections to the engine are made lazily."""

    name: ClassVar[str]

    @abc.abstractmethod
    def validate(self, spec: SandboxSpec) -> None:
        """Refuse a spec this backend cannot create, before anything is made.

        :raises ConfigError: naming what is wrong with ``spec``.
        """

    @abc.abstractmethod
    def default_image(self) -> str:
        """The image new sandboxes use when their spec names none.

        :raises ImageMissing: it is not built (naming how to build it).
        """

    def keeps_spare_connection(self) -> bool:
        """Whether a new sandbox may keep the connection its readiness check opened, for
        :class:`cubicle.orchestrator.sandbox.Sandbox`'s first ``connect()``: only where the agent
        takes several connections at once and an idle held one costs nothing the caller's
        connections need (default False: a VM's channel takes one connection at a time)."""
        return False

    def agent_takes_several_connections(self) -> bool:
        """Whether a sandbox's agent serves several connections at once (Docker: each is its
        own ``docker exec``). False (the default): a VM's channel takes one connection at a
        time, so a holder that pauses (a run waiting at the hand-over) lets it go meanwhile."""
        return False

    @abc.abstractmethod
    def doctor(self) -> list[DoctorCheck]:
        """Check the engine, the image and the accelerator; never raises."""

    @abc.abstractmethod
    def build_image(self, *, progress: Progress, force: bool = False) -> str:
        """Build the guest image if missing (content-addressed; unchanged: no-op); its ref."""

    @abc.abstractmethod
    def create(self, spec: SandboxSpec) -> SandboxInfo:
        """Create and start a sandbox; return once it runs (not necessarily ready).

        On failure, removes whatever it created and raises.
        """

    @abc.abstractmethod
    def open_stream(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        """Open a byte stream to the sandbox's agent, waiting up to ``timeout`` s for it.

        Docker: the engine's exec stream to a bridge in the container; VM: the virtio-serial
        channel's host socket (one connection at a time). The caller owns the socket.

        :raises AgentConnectionError: the agent cannot be reached.
        """

    def connect(self, sandbox_id: str, *, timeout: float) -> AgentClient:
        """Open a connection to the sandbox's agent (no hello sent). Caller closes it."""
        stream = self.open_stream(sandbox_id, timeout=timeout)
        return AgentClient(stream.sock, name=stream.name, codec=stream.codec)

    async def connect_async(self, sandbox_id: str, *, timeout: float) -> AsyncAgentClient:
        """:meth:`connect` for anyio: an :class:`~cubicle.drivers.async_client.AsyncAgentClient` (no
        hello sent). Opening runs in a worker thread. Caller closes it."""
        stream = await anyio.to_thread.run_sync(
            functools.partial(self.open_stream, sandbox_id, timeout=timeout)
        )
        try:
            wrapped = await anyio.abc.SocketStream.from_socket(stream.sock)
        except BaseException:
            stream.sock.close()
            raise
        return AsyncAgentClient(wrapped, name=stream.name, codec=stream.codec)

    def open_egress_control(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        """Open a byte stream to the control socket of an ``ask:`` sandbox's egress proxy
        (:mod:`cubicle.egress.questions`; used through
        :class:`cubicle.orchestrator.origin_questions.OriginQuestions`). Never reachable from the
        guest. The caller owns the socket.

        :raises ProviderError: this backend or this sandbox has no ask-mode proxy.
        """
        raise ProviderError(
            f"{self.name} sandbox {sandbox_id} has no egress control socket (ask mode is not "
            f"supported on the {self.name} backend)"
        )

    def agent_socket(self, sandbox_id: str) -> str:
        """Path of a host unix socket that reaches the sandbox's agent, where one exists.

        VM: the virtio-serial channel's socket. Backends that reach the agent over an engine's
        exec stream (Docker) have none: use :meth:`connect` / :meth:`connect_async`.

        :raises ProviderError: this backend has no host socket.
        """
        raise ProviderError(
            f"{self.name} sandbox {sandbox_id} has no agent socket on the host: its agent is "
            "reached over the engine's exec stream",
            hint="use Sandbox.connect() (or connect_async()) and pass the client to GuestDriver",
        )

    def exec(self, sandbox_id: str, argv: Sequence[str], *, timeout: float = 60.0) -> ExecResult:
        """Run ``argv`` (never a shell string) in the guest as the desktop user, through the
        agent's ``exec`` op; the program gets ``timeout`` s.

        :raises ConfigError: ``argv`` is a string or empty.
        """
        if isinstance(argv, str) or not argv:
            raise ConfigError(f"exec needs a non-empty argument list, got {argv!r:.80}")
        with self.connect(sandbox_id, timeout=10.0) as client:
            client.hello(timeout=10.0)
            result = client.exec(
                argv, timeout_ms=int(timeout * 1000), timeout=timeout + EXEC_MARGIN_S
            ).result
        return ExecResult.from_reply(result)

    def egress_log(self, sandbox_id: str, *, tail: int | str = "all") -> str:
        """The egress proxy's decision log (JSON lines) of an ``allow:`` sandbox; ``""`` when it
        has none (the default: a backend without a proxy). ``tail``: last lines, or ``"all"``."""
        return ""

    @abc.abstractmethod
    def logs(self, sandbox_id: str, *, tail: int = 50) -> str:
        """The guest's last log lines (agent, X, init), for error messages."""

    @abc.abstractmethod
    def mark_ready(self, sandbox_id: str) -> None:
        """Set the sandbox's ready mark (:mod:`cubicle.orchestrator.ownership`), once, after its
        agent answered: from then on a detached sandbox is owned by its expiry alone.

        :raises SandboxNotFound: it is gone (e.g. ``gc`` took it because its owner died).
        """

    def pool_members(self) -> PoolMembers[Any]:
        """This backend's warm-pool members, bound to this provider.

        :raises ConfigError: this backend has no pools (the default).
        """
        raise ConfigError(
            f"pools on the {self.name} backend are not supported", hint="pool backends: docker, vm"
        )

    def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything created for it, in the same order on every backend:
        first the host helpers that serve it (its live view servers, background processes of
        the host: :func:`~cubicle.orchestrator.view_servers.stop_view_servers`), then the
        backend's own objects (:meth:`remove_objects`). Idempotent: unknown id → no error.

        :raises ConfigError: ``sandbox_id`` is not a sandbox id.
        """
        stop_view_servers(sandbox_id)
        self.remove_objects(sandbox_id)
        clear_mark(sandbox_id)  # a resumable sandbox's mark goes with it

    @abc.abstractmethod
    def remove_objects(self, sandbox_id: str) -> None:
        """Remove what the backend created for the sandbox (container or domain, networks,
        proxies, run folders …); :meth:`destroy` calls it once the host helpers are stopped.
        Idempotent: unknown id → no error."""

    @abc.abstractmethod
    def list(self) -> list[SandboxInfo]:
        """cubicle's sandboxes on this backend (never anything else)."""

    def describe(self, sandbox_id: str) -> SandboxInfo | None:
        """The sandbox as :meth:`list` shows it, or ``None`` if it does not exist (any state)."""
        return next((info for info in self.list() if info.id == sandbox_id), None)

    def gc(self) -> builtins.list[str]:
        """Destroy the sandboxes :func:`cubicle.orchestrator.ownership.verdict` dooms, one by one,
        as
        :meth:`doomed` names them; return the ids removed. Each part of :meth:`gc_scopes` in
        turn judges its own sandboxes and removes them with its own :meth:`destroy`."""
        removed: builtins.list[str] = []
        for scope in self.gc_scopes():
            for sandbox_id, reason in scope.doomed():
                log.info("gc: removing %s (%s)", sandbox_id, reason)
                scope.destroy(sandbox_id)
                removed.append(sandbox_id)
        return removed

    def gc_scopes(self) -> Iterable[Provider]:
        """The parts :meth:`gc` collects one after the other: this provider (the default). A
        provider spanning several places (Docker's engines) gives one provider bound to each,
        so that a sandbox is judged and removed where it was found; a place it cannot reach may
        be left out (with a warning) or raise."""
        return (self,)

    def doomed(self) -> Iterator[tuple[str, str]]:
        """``(sandbox id, why)`` for each sandbox ``gc`` must remove, judged one at a time when
        the iteration reaches it (:func:`cubicle.orchestrator.ownership.verdict`: the owner first,
        then a fresh read of the ready mark) — never a snapshot followed by a sweep. Objects whose
        labels do not parse are skipped with a warning naming them."""
        raise NotImplementedError(f"the {self.name} backend has no gc")
