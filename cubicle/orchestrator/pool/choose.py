"""Choosing the member a claim takes, the same for every backend's pool module
(:mod:`cubicle.orchestrator.pool.docker_pool`, :mod:`cubicle.orchestrator.pool.vm_pool`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.claims import Claim

__all__ = ["PoolMember", "claim_first"]


class PoolMember(Protocol):
    """What every backend's member listing says of a member."""

    @property
    def sandbox_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def expires_at(self) -> float: ...


M = TypeVar("M", bound=PoolMember)


def claim_first(found: Iterable[M], claim_member: Callable[[M], Claim | None]) -> Claim | None:
    """Claim one of the members ``found`` (a pool's listing): the running ones not in their last
    :data:`~cubicle.orchestrator.pool_marks.CLAIM_MARGIN_S`, tried in random order (concurrent
    claimers rarely collide) until ``claim_member`` wins one; None when none was won."""
    now = time.time()
    candidates = [
        m for m in found if m.state == "running" and m.expires_at > now + marks.CLAIM_MARGIN_S
    ]
    random.shuffle(candidates)
    for member in candidates:
        claimed = claim_member(member)
        if claimed is not None:
            return claimed
    return None
