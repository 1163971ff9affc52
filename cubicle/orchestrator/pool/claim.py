"""The warm pools' claimer (:mod:`cubicle.orchestrator.claims`, which names it in its ``PLUGINS``):
:meth:`cubicle.orchestrator.sandbox.Sandbox.create` asks it for a ready member of a matching pool;
None means ``create`` starts a sandbox as before.

Cost when no pool exists: one directory read (:func:`cubicle.orchestrator.pool.registry.has_pools`).
"""

from __future__ import annotations

import time

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.pool import registry
from cubicle.orchestrator.provider import Claim, Provider, SandboxSpec

__all__ = ["claim", "engine_of", "shape_for"]


def engine_of(provider: Provider) -> str:
    """Where ``provider`` starts sandboxes (part of a pool's shape): the Docker engine's URL
    (:meth:`cubicle.orchestrator.provider.PoolMembers.engine`).

    :raises ConfigError: ``provider``'s backend has no pools.
    """
    return provider.pool_members().engine()


def shape_for(provider: Provider, spec: SandboxSpec) -> registry.PoolShape:
    """The pool shape a request for ``spec`` on ``provider`` matches.

    :raises ConfigError: ``provider``'s backend has no pools.
    """
    image = spec.image or provider.default_image()
    return registry.PoolShape.of(provider.name, engine_of(provider), str(image), spec)


def claim(provider: Provider, spec: SandboxSpec) -> Claim | None:
    """A claimed member for ``spec`` (now owned per ``spec``: its lifetime and ttl), or None:
    no matching pool, or none of its members ready. Either way after a match the pool's
    refiller is asked to top it up. (A :data:`cubicle.orchestrator.claims.Claimer`.)"""
    if not registry.has_pools():
        return None
    from cubicle.orchestrator import pool_marks as marks  # noqa: PLC0415 — only with pools
    from cubicle.orchestrator.pool import refill  # noqa: PLC0415

    try:
        members = provider.pool_members()
    except ConfigError:
        return None  # a backend without pools
    record = registry.read(shape_for(provider, spec).key)
    if record is None or record.expires_at < time.time() + marks.CLAIM_MARGIN_S:
        return None
    claimed = members.claim(record.key, spec)
    refill.request(record.key)
    return claimed
