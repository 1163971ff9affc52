"""Host-side errors of the orchestrator, under the one root
:class:`cubicle_guest.errors.CubicleError`::

CubicleError
├── ProtocolError / GuestError            (cubicle_guest.errors: the wire and the agent)
├── AgentConnectionError / AgentTimeout   (cubicle_guest.client)
└── OrchestratorError
    ├── ConfigError            bad user input: network policy, size, ttl, backend name
    ├── EngineUnavailable      the Docker engine / libvirt does not answer (hint: how to start it)
    ├── ImageMissing           the guest image is not built (hint: cubicle image build)
    ├── ImageBuildError        building the image failed (with the failing step's log tail)
    ├── SandboxNotFound        no cubicle sandbox has that id
    ├── SandboxStartError      a sandbox did not become ready (with the guest's log tail)
    ├── ProviderError          the engine refused an operation (with its message)
    └── TransferError          a file copy in or out of a sandbox was refused or failed
"""

from __future__ import annotations

from cubicle_guest.errors import CubicleError

__all__ = [
    "ConfigError",
    "EngineUnavailable",
    "ImageBuildError",
    "ImageMissing",
    "OrchestratorError",
    "ProviderError",
    "SandboxNotFound",
    "SandboxStartError",
    "TransferError",
]


class OrchestratorError(CubicleError):
    """Base of the orchestrator's errors."""


class ConfigError(OrchestratorError, ValueError):
    """Bad user input (network policy, screen size, ttl, backend), named in the message."""


class EngineUnavailable(OrchestratorError):
    """The backend engine (dockerd, libvirtd) is not reachable; ``hint`` says how to fix it."""


class ImageMissing(OrchestratorError):
    """The guest image/disk for a backend is not built; ``hint`` says how to build it."""


class ImageBuildError(OrchestratorError):
    """Building a guest image failed; ``log_tail`` holds the last lines of the failing step."""

    def __init__(self, message: str, *, log_tail: str = "", hint: str | None = None) -> None:
        super().__init__(
            message + (f"\n--- log tail ---\n{log_tail}" if log_tail else ""), hint=hint
        )
        self.log_tail = log_tail


class SandboxNotFound(OrchestratorError, LookupError):
    """No cubicle sandbox with that id exists (on this backend)."""


class SandboxStartError(OrchestratorError):
    """A sandbox did not become ready; everything it created has been removed.

    ``log_tail`` holds the guest's last log lines.
    """

    def __init__(
        self, message: str, *, sandbox_id: str, log_tail: str = "", hint: str | None = None
    ) -> None:
        super().__init__(
            message + (f"\n--- guest log tail ---\n{log_tail}" if log_tail else ""), hint=hint
        )
        self.sandbox_id = sandbox_id
        self.log_tail = log_tail


class ProviderError(OrchestratorError):
    """The engine refused an operation; the message carries the engine's words."""


class TransferError(OrchestratorError):
    """A copy in or out of a sandbox (``upload``, ``download``, ``cubicle cp``) was refused or
    failed; the message names the path and why, and nothing is left under the destination's
    name."""
