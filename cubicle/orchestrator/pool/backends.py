"""The pool functions of each backend, chosen by a pool shape's backend name:
:mod:`cubicle.orchestrator.providers.docker.pool_members` and
:mod:`cubicle.orchestrator.providers.vm.pool_members` offer the same ones (member provider, listing,
the atomic claim, what a drain needs). Each backend's module is imported only when a pool of that
backend is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from cubicle.orchestrator.claims import Claim
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.pool.choose import PoolMember
from cubicle.orchestrator.provider import Provider, SandboxSpec

__all__ = ["BACKENDS", "PoolBackend", "pool_backend"]

BACKENDS: Final = {
    "docker": "cubicle.orchestrator.providers.docker.pool_members",
    "vm": "cubicle.orchestrator.providers.vm.pool_members",
}
"""Backends with pools, and the module of each."""


class PoolBackend(Protocol):
    """The functions a backend's pool module offers (``provider`` is that backend's)."""

    def PoolMemberProvider(self, key: str) -> Provider: ...

    def members(self, provider: Any, key: str | None = None) -> Sequence[PoolMember]: ...

    def take(self, provider: Any, member: Any, spec: SandboxSpec) -> bool: ...

    def claim(self, provider: Any, key: str, spec: SandboxSpec) -> Claim | None: ...

    def creating_by(self, provider: Any, owners: set[tuple[int, int]]) -> list[str]: ...


def pool_backend(backend: str) -> PoolBackend:
    """The pool module of ``backend``.

    :raises ConfigError: ``backend`` has no pools (named, with the ones that have).
    """
    module = BACKENDS.get(backend)
    if module is None:
        raise ConfigError(
            f"pools on the {backend} backend are not supported",
            hint=f"pool backends: {', '.join(sorted(BACKENDS))}",
        )
    found: PoolBackend = importlib.import_module(module)
    return found


if TYPE_CHECKING:  # mypy checks that each backend's module offers the functions
    from cubicle.orchestrator.providers.docker import pool_members as docker_pool
    from cubicle.orchestrator.providers.vm import pool_members as vm_pool

    _docker: PoolBackend = docker_pool
    _vm: PoolBackend = vm_pool
