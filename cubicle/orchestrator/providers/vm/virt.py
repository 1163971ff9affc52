"""The libvirt connection of the VM backend, the mapping of libvirt's errors (the one place),
"the domain is gone" (:func:`unless_gone`) and libvirt's domain states by name.

``libvirt`` is imported lazily (the ``vm`` extra); every ``libvirt.libvirtError`` raised inside
:func:`map_libvirt_errors` becomes a cubicle error naming the operation and libvirt's words.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from cubicle.orchestrator.errors import EngineUnavailable, ProviderError

__all__ = [
    "DEFAULT_URI",
    "DomainState",
    "is_no_domain",
    "libvirt_module",
    "map_libvirt_errors",
    "open_connection",
    "sandbox_state",
    "unless_gone",
]

T = TypeVar("T")

DEFAULT_URI = os.environ.get(
    "CUBICLE_LIBVIRT_URI",
    "qemu:///system" if sys.platform == "linux" and os.geteuid() == 0 else "qemu:///session",
)
"""libvirt's system daemon for root on Linux; otherwise the user's own session daemon (which
libvirt's client starts on demand: a normal user on Linux, Homebrew libvirt on macOS)."""
ENSURE_HINT = "start libvirt with: scripts/ensure-libvirt (as root), or systemctl start libvirtd"


def libvirt_module() -> Any:
    """The ``libvirt`` module (imported on first use: it is the optional ``vm`` extra)."""
    try:
        import libvirt  # noqa: PLC0415 — optional dependency, imported on first use
    except ImportError as exc:
        raise EngineUnavailable(
            f"the VM backend needs libvirt-python, which is not importable ({exc})",
            hint="pip install 'cubicle[vm]' (needs libvirt-dev, pkg-config and gcc to build)",
        ) from None
    # libvirt prints every error to stderr by default; we raise them instead
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def open_connection(uri: str = DEFAULT_URI) -> Any:
    """A ``libvirt.virConnect`` to ``uri``.

    :raises EngineUnavailable: libvirt-python is missing or libvirtd does not answer.
    """
    libvirt = libvirt_module()
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise EngineUnavailable(
            f"libvirt does not answer at {uri}: {exc.get_error_message()}", hint=ENSURE_HINT
        ) from None


def is_no_domain(exc: BaseException) -> bool:
    """True when ``exc`` is libvirt's "no such domain" (a domain already gone)."""
    libvirt = libvirt_module()
    return isinstance(exc, libvirt.libvirtError) and exc.get_error_code() in (
        libvirt.VIR_ERR_NO_DOMAIN,
        libvirt.VIR_ERR_OPERATION_INVALID,  # "domain is not running"
    )


def unless_gone(call: Callable[[], T]) -> T | None:
    """``call()``'s result, or None when libvirt says the domain it acts on is gone (no such
    domain, or not running). Any other libvirt error propagates."""
    try:
        return call()
    except Exception as exc:
        if is_no_domain(exc):
            return None
        raise


class DomainState(enum.IntEnum):
    """libvirt's ``virDomainState`` (``libvirt.VIR_DOMAIN_*``), by name."""

    NOSTATE = 0
    RUNNING = 1
    BLOCKED = 2
    PAUSED = 3
    SHUTDOWN = 4
    """Being shut down."""
    SHUTOFF = 5
    CRASHED = 6
    PMSUSPENDED = 7


SANDBOX_STATES: dict[DomainState, str] = {
    DomainState.RUNNING: "running",
    DomainState.PAUSED: "paused",
    DomainState.SHUTDOWN: "stopping",
    DomainState.SHUTOFF: "exited",
    DomainState.CRASHED: "crashed",
}
"""A domain state as ``SandboxInfo.state`` names it (other states: ``unknown``)."""


def sandbox_state(dom: Any) -> str:
    """The ``SandboxInfo.state`` of a ``virDomain``: ``exited`` once libvirt no longer has it."""
    state = unless_gone(dom.state)
    if state is None:
        return "exited"
    try:
        return SANDBOX_STATES.get(DomainState(state[0]), "unknown")
    except ValueError:
        return "unknown"


@contextmanager
def map_libvirt_errors(what: str) -> Iterator[None]:
    """Turn a ``libvirtError`` raised while doing ``what`` into :class:`ProviderError`."""
    libvirt = libvirt_module()
    try:
        yield
    except libvirt.libvirtError as exc:
        raise ProviderError(f"libvirt refused to {what}: {exc.get_error_message()}") from exc
