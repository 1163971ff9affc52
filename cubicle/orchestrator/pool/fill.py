"""Making pool members: start sandboxes of a pool's shape and park them, until the pool holds its
size in ready members (``pool fill`` in the foreground, the refiller in the background).

Whoever fills holds the pool's filler lock (:func:`cubicle.orchestrator.pool.registry.fill_lock`).
Each member is made by :meth:`cubicle.orchestrator.sandbox.Sandbox.create` with ``pool=False`` and
the backend's member provider (:meth:`cubicle.orchestrator.provider.PoolMembers.member_provider`),
so a member killed mid-start is an orphan ``gc`` takes (its creator is gone) and a failed one is
removed before the error is raised. A member made after its pool was drained is removed at once.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.pool import registry
from cubicle.orchestrator.pool.registry import PoolRecord
from cubicle.orchestrator.provider import Progress, SandboxSpec
from cubicle.orchestrator.providers import get_provider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.errors import CubicleError

__all__ = ["DEFAULT_PARALLEL", "fill", "member_spec"]

DEFAULT_PARALLEL: Final = 2
"""Members started at once (each start is mostly CPU: 2 keeps a 2-core host responsive)."""
MAX_FAILURES: Final = 3
"""Consecutive failed member starts after which a fill gives up (the error is raised)."""


def member_spec(record: PoolRecord) -> SandboxSpec:
    """The spec of a member of ``record``: detached, expiring with the pool."""
    shape = record.shape
    return SandboxSpec(
        screen=shape.screen,
        network=NetworkPolicy.parse(shape.network),
        ttl_s=max(1.0, record.expires_at - time.time()),
        memory_mb=shape.memory_mb,
        cpus=shape.cpus,
        pids_limit=shape.pids_limit,
        image=shape.image,
        detached=True,
    )


def _make_one(record: PoolRecord, ready_timeout_s: float) -> str | None:
    """Start one member; its id, or None when the pool was drained meanwhile (then removed)."""
    provider = get_provider(record.shape.backend).pool_members().member_provider(record.key)
    sandbox = Sandbox.create(
        spec=member_spec(record), provider=provider, pool=False, ready_timeout_s=ready_timeout_s
    )
    sandbox.close()  # its first connection is the claimer's to open
    if registry.read(record.key) is None:
        sandbox.destroy()
        return None
    return sandbox.id


def missing(record: PoolRecord) -> int:
    """How many ready members pool ``record`` lacks (a member that stopped is not ready)."""
    members = get_provider(record.shape.backend).pool_members()
    running = [m for m in members.members(record.key) if m.state == "running"]
    return max(0, record.size - len(running))


def fill(
    record: PoolRecord,
    *,
    progress: Progress,
    parallel: int = DEFAULT_PARALLEL,
    ready_timeout_s: float = 90.0,
) -> list[str]:
    """Start members until pool ``record`` holds its size in ready members, the pool is gone or
    expired, or :data:`MAX_FAILURES` starts in a row failed (then raise the last error).
    The caller holds the filler lock. Returns the ids made."""
    made: list[str] = []
    failures = 0
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as workers:
        while True:
            current = registry.read(record.key)
            if current is None or current.expires_at < time.time() + marks.CLAIM_MARGIN_S:
                return made
            count = min(missing(current), max(1, parallel))
            if count == 0:
                return made
            futures = [workers.submit(_make_one, current, ready_timeout_s) for _ in range(count)]
            for future in futures:
                try:
                    sandbox_id = future.result()
                except CubicleError as exc:
                    failures += 1
                    progress(f"pool {record.key}: a member failed to start: {exc}")
                    if failures >= MAX_FAILURES:
                        raise ProviderError(
                            f"pool {record.key}: {failures} member starts in a row failed; "
                            f"last: {exc}"
                        ) from exc
                    continue
                failures = 0
                if sandbox_id is not None:
                    made.append(sandbox_id)
                    progress(f"pool {record.key}: {sandbox_id} ready")
