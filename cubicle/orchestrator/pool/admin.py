"""What ``cubicle pool fill|ls|drain`` and ``cubicle gc`` do with pools.

- :func:`start` records a pool (or resizes one and extends its expiry) and fills it in the
  foreground under its filler lock.
- :func:`status`: each pool with its ready members, whether a filler is at work, its refillers.
- :func:`drain`: forget the pool first (no claim starts on it after), end its refillers, wait for
  its filler lock (a foreground fill finishes its member and removes it), then remove what is
  left — members still being created by an ended refiller, and every ready member, each claimed
  first by the drain itself so that a concurrent claimer never gets one being removed. Claimed
  sandboxes are their claimers' and stay.
- :func:`gc`: pools past their expiry are forgotten and their refillers ended; refillers of
  pools that no longer exist too. Expired members are ordinary expired sandboxes: the
  provider's ``gc`` takes them.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Final

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.errors import ConfigError, EngineUnavailable, ImageMissing
from cubicle.orchestrator.hostprocs import argv_of
from cubicle.orchestrator.pool import fill, refill, registry
from cubicle.orchestrator.pool.claim import shape_for
from cubicle.orchestrator.pool.registry import PoolRecord
from cubicle.orchestrator.provider import PoolMembers, Progress, Provider, SandboxSpec
from cubicle.orchestrator.providers import PROVIDERS, get_provider

__all__ = ["PoolStatus", "drain", "gc", "start", "status"]

DRAIN_LOCK_WAIT_S: Final = 180.0


@dataclass(frozen=True)
class PoolStatus:
    record: PoolRecord
    ready: int
    filling: bool
    refillers: list[int]


def _backend(name: str) -> tuple[Provider, PoolMembers[Any]]:
    """A provider of backend ``name`` and its pool members.

    :raises ConfigError: a backend without pools (named), or an unknown one.
    """
    provider = get_provider(name)
    return provider, provider.pool_members()


def start(
    backend: str,
    spec: SandboxSpec,
    size: int,
    *,
    progress: Progress,
    parallel: int = fill.DEFAULT_PARALLEL,
    ready_timeout_s: float = 90.0,
) -> tuple[PoolRecord, list[str]]:
    """Record pool ``spec``'s shape with ``size`` members expiring ``spec.ttl_s`` from now, and
    fill it. Returns the record and the member ids made now.

    :raises ConfigError: bad size, or a backend without pools.
    """
    if size < 1:
        raise ConfigError(f"a pool holds at least 1 member, got {size}")
    if spec.ttl_s <= marks.CLAIM_MARGIN_S:
        raise ConfigError(
            f"pool ttl {spec.ttl_s:.0f} s is too short: members are not claimed in their last "
            f"{marks.CLAIM_MARGIN_S:.0f} s"
        )
    provider, _ = _backend(backend)
    provider.validate(spec)  # before anything is recorded
    shape = shape_for(provider, spec)
    record = PoolRecord(shape=shape, size=size, expires_at=time.time() + spec.ttl_s)
    registry.write(record)
    with registry.fill_lock(record.key, wait_s=None):
        made = fill.fill(
            record, progress=progress, parallel=parallel, ready_timeout_s=ready_timeout_s
        )
    return record, made


def status() -> list[PoolStatus]:
    """Every recorded pool, with its ready members and fillers."""
    found = []
    for record in registry.records():
        _, members = _backend(record.shape.backend)
        found.append(
            PoolStatus(
                record=record,
                ready=sum(m.state == "running" for m in members.members(record.key)),
                filling=not registry.lock_free(record.key),
                refillers=refill.refill_pids(record.key),
            )
        )
    return found


def drain(key: str) -> list[str]:
    """Remove pool ``key`` and its unclaimed members (see the module doc); the ids removed.

    :raises ConfigError: a malformed key. An unknown key drains whatever members it has.
    """
    record = registry.read(key)
    registry.remove(key)
    # who refills it, read before they are stopped: their half-made members carry their stamps
    owners = {(pid, L.process_start_ticks(pid) or 0) for pid in refill.refill_pids(key)}
    refill.stop_refills(key)
    if record is not None:
        return _drain(key, *_backend(record.shape.backend), owners)
    removed = []  # unknown: drain whatever members of it any backend with pools has
    for name in PROVIDERS:
        with contextlib.suppress(EngineUnavailable, ImageMissing):
            provider = get_provider(name)
            try:
                members = provider.pool_members()
            except ConfigError:
                continue  # a backend without pools
            removed += _drain(key, provider, members, owners)
    return removed


def _drain(
    key: str, provider: Provider, members: PoolMembers[Any], owners: set[tuple[int, int]]
) -> list[str]:
    """Drain pool ``key``'s ``members`` on ``provider``'s backend: the ones its stopped refillers
    (``owners``: pid and start time) were still creating, then its parked ones. Its record is
    already removed."""
    removed: list[str] = []
    with registry.fill_lock(key, wait_s=DRAIN_LOCK_WAIT_S):
        for sandbox_id in members.creating_by(owners):
            provider.destroy(sandbox_id)
            removed.append(sandbox_id)
        drainer = SandboxSpec(ttl_s=600.0)
        for member in members.members(key):
            if members.take(member, drainer):
                provider.destroy(member.sandbox_id)
                removed.append(member.sandbox_id)
    return removed


def gc(now: float | None = None) -> list[str]:
    """Forget expired pools and end their refillers, and refillers of pools gone; the keys."""
    when = time.time() if now is None else now
    forgotten = []
    for record in registry.records():
        if record.expires_at < when:
            registry.remove(record.key)
            refill.stop_refills(record.key)
            forgotten.append(record.key)
    known = {record.key for record in registry.records()}
    for pid in refill.refill_pids():
        key = _key_of(pid)
        if key is not None and key not in known:
            refill.stop_refills(key)
    return forgotten


def _key_of(pid: int) -> str | None:
    argv = argv_of(pid)  # python -m MODULE --pool KEY (refill.refill_pids)
    try:
        return argv[4].decode() if argv is not None else None
    except (IndexError, UnicodeDecodeError):
        return None
