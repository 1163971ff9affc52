"""The marks in a VM sandbox's run folder (root's and QEMU's group's alone): ready, pool member,
claim — each made once, atomically, and never changed (:mod:`cubicle.orchestrator.ownership`).

==================  =============================================================================
file                meaning
==================  =============================================================================
``ready``           the ready mark (``O_EXCL``): the agent answered; set once
``pool-member``     the sandbox is a member of the warm pool whose key the file holds; written
                    (``O_EXCL``) before ``ready``, so a ready member is never seen as a plain one
``claim.json``      the claim of a pool member: the claimer's labels (its stamp). Written whole
                    to a private temporary file, then hard-linked to this name: the link fails
                    for every claimer but the first, and no reader ever sees it half-written
==================  =============================================================================

**Whose stamp counts**: a run folder with a claim is judged by the claim's labels (the claimer,
the claim's lifetime and expiry); otherwise by ``labels.json`` / the domain's labels, which for
an unclaimed member say *detached* with the pool's expiry — the rule of
:func:`cubicle.orchestrator.pool_marks.effective_stamps`, here in files instead of containers.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Final

__all__ = [
    "CLAIM",
    "POOL_MEMBER",
    "READY",
    "claim",
    "claim_labels",
    "make_once",
    "member_key",
    "write_member",
]

READY: Final = "ready"
POOL_MEMBER: Final = "pool-member"
CLAIM: Final = "claim.json"


def make_once(path: Path, content: bytes = b"") -> bool:
    """Create ``path`` with ``content`` (mode ``0600``) unless it exists; whether this call did.

    :raises FileNotFoundError: its folder is gone.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, content)
    finally:
        os.close(fd)
    return True


def write_member(run: Path, key: str) -> None:
    """Mark the run folder's sandbox a member of pool ``key`` (once; before its ready mark)."""
    if not make_once(run / POOL_MEMBER, key.encode()) and member_key(run) != key:
        raise FileExistsError(f"{run / POOL_MEMBER} names another pool")


def member_key(run: Path) -> str | None:
    """The pool key of a member's run folder, or None (not a member, or the folder is gone)."""
    try:
        return (run / POOL_MEMBER).read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def claim(run: Path, labels: dict[str, str]) -> bool:
    """The atomic claim: ``claim.json`` holding ``labels``; False when someone claimed first.

    :raises FileNotFoundError: the run folder is gone (the member was removed).
    """
    partial = run / f".claim-{os.getpid()}-{secrets.token_hex(4)}.tmp"
    make_once(partial, json.dumps(labels, indent=2).encode() + b"\n")
    try:
        os.link(partial, run / CLAIM)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return True


def claim_labels(run: Path) -> dict[str, str] | None:
    """The claimer's labels of a claimed run folder, or None (unclaimed, gone or unreadable)."""
    try:
        data = json.loads((run / CLAIM).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(key): str(value) for key, value in data.items()}
