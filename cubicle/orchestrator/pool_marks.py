"""Pool marks on the engine: a member's name, a claim's marker, whose stamp counts, and which
member a claim tries (:func:`claim_first`, the same for every backend).

This module imports no backend (the backends' providers and pool members import it); it only knows
names, labels and the provider interface (:class:`cubicle.orchestrator.provider.PoolMember`).

====================================  ===========================================================
object                                meaning
====================================  ===========================================================
``cubicle-<id>-creating``             a sandbox (member or not) being created: its creator's
``cubicle-<id>.pool.<key>``           a ready, unclaimed member of pool ``<key>`` (the member's
                                      ready mark, set by the filler instead of ``cubicle-<id>``)
``cubicle-<id>-claim`` (role claim)   the claim: a never-started container labelled with the
                                      claimer's stamp; creating it is the atomic claim (a second
                                      create conflicts on the name)
``cubicle-<id>``                      the member after its claim (renamed by the claimer once
                                      the marker exists; the marker, not the name, is the claim)
====================================  ===========================================================

**Whose stamp counts**: a sandbox with a claim marker is judged by the marker's stamp (the
claimer, the claim's lifetime and expiry); otherwise by its objects' labels, which for an
unclaimed member say *detached* with the pool's expiry. :func:`effective_stamps` is that rule
for a listing; a reader that judged an unclaimed member doomed reads the marker again, fresh,
before acting (a claim may have landed since its listing).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypeVar

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import ownership
from cubicle.orchestrator.provider import Claim, PoolMember, Provider, SandboxSpec

__all__ = [
    "CLAIM_MARGIN_S",
    "CLAIM_ROLE",
    "POOL_INFIX",
    "claim_first",
    "claim_labels",
    "claim_marker_name",
    "effective_stamps",
    "is_member_name",
    "member_key",
    "member_name",
    "warm_up",
]

CLAIM_MARGIN_S: Final = 60.0
"""A member this close to its expiry is never claimed (so ``gc``, which takes it once expired,
cannot race a claim)."""
POOL_INFIX: Final = ".pool."
CLAIM_ROLE: Final = "claim"
_KEY = re.compile(r"[0-9a-f]{12}")


def member_name(sandbox_id: str, key: str) -> str:
    """The ready mark of an unclaimed member of pool ``key``."""
    if not _KEY.fullmatch(key):
        raise ValueError(f"not a pool key: {key!r}")
    return f"cubicle-{sandbox_id}{POOL_INFIX}{key}"


def member_key(name: str) -> str | None:
    """The pool key of a member's container name, or None (not an unclaimed member's name)."""
    _, sep, key = name.lstrip("/").rpartition(POOL_INFIX)
    return key if sep and _KEY.fullmatch(key) else None


def is_member_name(name: str) -> bool:
    return member_key(name) is not None


def claim_marker_name(sandbox_id: str) -> str:
    """The claim marker's container name: one per sandbox, so a second claim conflicts."""
    return f"cubicle-{sandbox_id}-claim"


def claim_labels(sandbox_id: str, spec: SandboxSpec) -> dict[str, str]:
    """The labels of a claim of ``sandbox_id`` for ``spec``: this process's stamp, the claim's
    lifetime and ttl (the claim marker's on Docker, ``claim.json``'s on VMs)."""
    return L.create_labels(
        sandbox_id,
        CLAIM_ROLE,
        owner=L.Owner.current(),
        ttl_s=spec.ttl_s,
        lifetime=ownership.lifetime_of(spec.detached),
        network=str(spec.network),
        screen=spec.screen,
    )


def effective_stamps(
    objects: Iterable[tuple[str, Mapping[str, str]]], id_prefix: str
) -> dict[str, ownership.Stamp]:
    """One stamp per sandbox id from ``(description, labels)`` of its objects: a claim marker's
    stamp wins over every other object's; objects whose labels do not parse are skipped with a
    warning naming them (:func:`cubicle.orchestrator.ownership.skip_malformed`)."""
    stamps: dict[str, ownership.Stamp] = {}
    claimed: set[str] = set()
    for what, labels in objects:
        stamp = ownership.skip_malformed(what, labels, id_prefix)
        if stamp is None:
            continue
        if labels.get(L.ROLE) == CLAIM_ROLE:
            stamps[stamp.sandbox_id] = stamp
            claimed.add(stamp.sandbox_id)
        elif stamp.sandbox_id not in claimed:
            stamps.setdefault(stamp.sandbox_id, stamp)
    return stamps


M = TypeVar("M", bound=PoolMember)


def claim_first(found: Iterable[M], claim_member: Callable[[M], Claim | None]) -> Claim | None:
    """Claim one of the members ``found`` (a pool's listing): the running ones not in their last
    :data:`CLAIM_MARGIN_S`, tried in random order (concurrent claimers rarely collide) until
    ``claim_member`` wins one; None when none was won."""
    now = time.time()
    candidates = [m for m in found if m.state == "running" and m.expires_at > now + CLAIM_MARGIN_S]
    random.shuffle(candidates)
    for member in candidates:
        claimed = claim_member(member)
        if claimed is not None:
            return claimed
    return None


def warm_up(provider: Provider, sandbox_id: str, *, timeout_s: float) -> None:
    """A member's warm-up before it is parked, the same on every backend: one screenshot, so
    that the claimer's first one finds the agent's capture path loaded and warm. It reads the
    screen and writes nothing; each step waits at most ``timeout_s`` seconds."""
    with provider.connect(sandbox_id, timeout=timeout_s) as client:
        client.hello(timeout=timeout_s)
        client.screenshot(timeout=timeout_s)
