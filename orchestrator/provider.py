"""The provider interface every sandbox backend implements (Docker, libvirt VM, ...).

A provider turns a :class:`SandboxSpec` into a running guest whose agent is reachable, and
removes it again. It knows nothing about models or drivers; :class:`orchestrator.sandbox.Sandbox`
adds the lifecycle (readiness, signals, ``with``) on top of it.

Ownership: everything a provider creates for a sandbox (container/domain, networks, overlay
disks, socket directories) is labelled as cubicle's with the owner (pid + host) and an expiry,
and :meth:`Provider.destroy` removes all of it. :meth:`Provider.gc` removes only cubicle
sandboxes whose owner process is gone (on this host) or whose expiry passed.

To add a provider: subclass :class:`Provider` in ``orchestrator/providers/<name>.py``, set
``name``, implement the abstract methods, and register it in
:data:`orchestrator.providers.PROVIDERS`.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from guest.client import AgentClient
from orchestrator.network import NetworkPolicy

__all__ = ["DoctorCheck", "ExecResult", "Progress", "Provider", "SandboxInfo", "SandboxSpec"]

Progress = Callable[[str], None]
"""Receives one human-readable progress line at a time (image builds, slow starts)."""


@dataclass(frozen=True)
class SandboxSpec:
    """What to create. Sizes in pixels; memory in MiB; ttl in seconds."""

    screen: tuple[int, int] = (1280, 800)
    network: NetworkPolicy = field(default_factory=NetworkPolicy.none)
    ttl_s: float = 3600.0
    memory_mb: int = 2048
    cpus: float = 2.0
    pids_limit: int = 1024
    image: str | None = None
    """Backend image reference; ``None`` means the provider's default (built) image."""
    detached: bool = False
    """``False``: the creating process owns the sandbox and ``gc`` removes it once that process is
    gone. ``True`` (``cubicle up``): no owner process; only ``down`` or the expiry removes it."""


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


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass(frozen=True)
class DoctorCheck:
    """One line of ``cubicle doctor``: what was checked, whether it is fine, and the fix."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


class Provider(abc.ABC):
    """A sandbox backend. Instances are cheap; connections to the engine are made lazily."""

    name: ClassVar[str]

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
    def connect(self, sandbox_id: str, *, timeout: float) -> AgentClient:
        """Open a connection to the sandbox's agent (no hello sent). Caller closes it."""

    @abc.abstractmethod
    def agent_socket(self, sandbox_id: str) -> str:
        """Path of the host unix socket that reaches the sandbox's agent (for async drivers).

        Docker: the socket in the sandbox's bind-mounted directory; VM: the virtio-serial
        channel's socket (which accepts one connection at a time).
        """

    @abc.abstractmethod
    def exec(self, sandbox_id: str, argv: Sequence[str], *, timeout: float = 60.0) -> ExecResult:
        """Run ``argv`` (never a shell string) in the guest as the desktop user."""

    @abc.abstractmethod
    def logs(self, sandbox_id: str, *, tail: int = 50) -> str:
        """The guest's last log lines (agent, X, init), for error messages."""

    @abc.abstractmethod
    def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything created for it. Idempotent: unknown id → no error."""

    @abc.abstractmethod
    def list(self) -> list[SandboxInfo]:
        """cubicle's sandboxes on this backend (never anything else)."""

    def describe(self, sandbox_id: str) -> SandboxInfo | None:
        """The sandbox as :meth:`list` shows it, or ``None`` if it does not exist (any state)."""
        return next((info for info in self.list() if info.id == sandbox_id), None)

    @abc.abstractmethod
    def gc(self) -> builtins.list[str]:
        """Destroy cubicle sandboxes whose owner process is gone or expiry passed; return ids."""
