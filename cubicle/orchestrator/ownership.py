"""Who owns a sandbox at every moment, and when ``gc`` may take it — one rule for every backend.

Every object of a sandbox carries its **stamp** (:mod:`cubicle.orchestrator.labels`): the sandbox
id, the process that created it (pid, start ticks, host), its expiry and its **lifetime**
(``owned``: the creating process keeps it; ``detached``: ``cubicle up``, its TTL keeps it). Labels
never change. What changes is one atomic **ready mark** the backend keeps per sandbox:

=========  =======================  =========================================================
state      how it is seen           who owns it; when ``gc`` takes it
=========  =======================  =========================================================
creating   no ready mark yet        the creating process: taken once that process is gone
                                    (pid gone or reused, on this host), **never** while it
                                    lives — not even after the expiry. An owner on another
                                    host: :data:`REMOTE_CREATING_GRACE_S` after the expiry.
owned      ready, lifetime owned    the creating process: taken when it is gone or the
                                    expiry passed
detached   ready, lifetime detached its TTL alone: taken once the expiry passed
=========  =======================  =========================================================

The ready mark, per backend (set once, by
:meth:`cubicle.orchestrator.provider.Provider.mark_ready`, after the agent answered ``hello``):

- **Docker**: the guest container's *name*. It is created as ``cubicle-<id>-creating`` and renamed
  to ``cubicle-<id>`` when ready. A rename is atomic on the engine, and a second rename to a name
  in use fails — the primitive a warm pool's claim reuses.
- **VM**: a ``ready`` file in the sandbox's root-only run folder, created with ``O_EXCL``.

The decision (:func:`verdict`) reads the owner's liveness *first* and the ready mark *after*,
fresh: a sandbox is marked ready before its creating process can exit, so an owner seen dead
means the mark read next is final. ``gc`` thus never removes a sandbox another live process is
creating, whatever it listed before. It decides sandbox by sandbox, never "everything not in a
snapshot", and removes a doomed sandbox with the provider's ``destroy`` (its per-sandbox
clean-up steps).

Other users of the same mechanism: a **warm pool** keeps ready, detached sandboxes and a claim
is one more atomic mark that names the claimer (Docker: a claim marker container whose create
conflicts for the second claimer; VM: ``claim.json`` hard-linked into the run folder, which
fails for the second; :mod:`cubicle.orchestrator.pool`); **remote engines** already work:
the stamp carries the owner's host, and pids are only judged on that host.

A ready, owned sandbox whose owner is gone may be **resumable**
(:mod:`cubicle.orchestrator.resume_marks`): a mark on this host, written after its run's first
completed turn, keeps it while the mark's holder lives or until its deadline (``cubicle run
--resume``).

Objects whose stamp does not parse (:class:`MalformedStamp`) are skipped by ``gc`` and ``ls``
with a warning naming them; the rest go on.
"""

from __future__ import annotations

import logging
import math
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import resume_marks
from cubicle.orchestrator.errors import OrchestratorError

__all__ = [
    "REMOTE_CREATING_GRACE_S",
    "MalformedStamp",
    "Stamp",
    "is_sandbox_id",
    "lifetime_of",
    "parse_stamp",
    "skip_malformed",
    "verdict",
]

log = logging.getLogger("cubicle.orchestrator.ownership")

REMOTE_CREATING_GRACE_S: Final = 600.0
"""A sandbox still creating, owned from another host (whose pids this host cannot judge), is
taken this long after its expiry."""

Lifetime = Literal["owned", "detached"]
_ID = re.compile(r"(dk|vm)-[0-9a-z]{1,32}")


class MalformedStamp(OrchestratorError):
    """An object's cubicle labels do not parse; the message names the label and its value."""


@dataclass(frozen=True)
class Stamp:
    """The immutable ownership facts of one sandbox object (see the module doc)."""

    sandbox_id: str
    owner: L.Owner
    created_at: float
    expires_at: float
    lifetime: Lifetime

    @property
    def local(self) -> bool:
        """The owner runs on this host (its pid can be judged here)."""
        return self.owner.host == socket.gethostname()

    def owner_gone(self) -> bool:
        """The owning process is gone (only judged on this host; pid 0 is never "gone")."""
        return self.owner.pid > 0 and self.local and not L.owner_alive(_owner_labels(self.owner))


def _owner_labels(owner: L.Owner) -> dict[str, str]:
    return {
        L.OWNER_PID: str(owner.pid),
        L.OWNER_START: str(owner.start_ticks),
        L.OWNER_HOST: owner.host,
    }


def _number(labels: Mapping[str, str], key: str, default: str | None = None) -> float:
    raw = labels.get(key, default)
    try:
        value = float(raw) if raw is not None else float("nan")
    except ValueError:
        value = float("nan")
    if not math.isfinite(value):
        raise MalformedStamp(f"label {key}={raw!r} is not a number")
    return value


def is_sandbox_id(text: str, id_prefix: str) -> bool:
    """``text`` is a well-formed sandbox id of the backend whose ids start with ``id_prefix``."""
    return bool(_ID.fullmatch(text)) and text.startswith(id_prefix)


def parse_stamp(labels: Mapping[str, str], *, id_prefix: str | None = None) -> Stamp:
    """The stamp of an object from its labels.

    Objects from before lifetimes existed (no ``io.cubicle.lifetime``) are ``detached`` when their
    owner pid is 0, else ``owned``.

    :raises MalformedStamp: a label is missing or does not parse (the message names it).
    """
    sandbox_id = labels.get(L.SANDBOX, "")
    if not is_sandbox_id(sandbox_id, id_prefix or ""):
        raise MalformedStamp(f"label {L.SANDBOX}={sandbox_id!r} is not a sandbox id")
    pid = _number(labels, L.OWNER_PID, "0")
    start = _number(labels, L.OWNER_START, "0")
    if pid < 0 or pid != int(pid) or start < 0 or start != int(start):
        raise MalformedStamp(
            f"labels {L.OWNER_PID}={labels.get(L.OWNER_PID)!r} "
            f"{L.OWNER_START}={labels.get(L.OWNER_START)!r} are not a process"
        )
    lifetime = labels.get(L.LIFETIME) or ("detached" if pid == 0 else "owned")
    if lifetime not in ("owned", "detached"):
        raise MalformedStamp(f"label {L.LIFETIME}={lifetime!r} is neither owned nor detached")
    return Stamp(
        sandbox_id=sandbox_id,
        owner=L.Owner(int(pid), int(start), labels.get(L.OWNER_HOST, "")),
        created_at=_number(labels, L.CREATED_AT),
        expires_at=_number(labels, L.EXPIRES_AT),
        lifetime="detached" if lifetime == "detached" else "owned",
    )


def skip_malformed(what: str, labels: Mapping[str, str], id_prefix: str) -> Stamp | None:
    """:func:`parse_stamp`, or None after a warning naming ``what`` (the object) and why."""
    try:
        return parse_stamp(labels, id_prefix=id_prefix)
    except MalformedStamp as exc:
        log.warning("skipping %s: %s", what, exc)
        return None


def verdict(stamp: Stamp, is_ready: Callable[[], bool], now: float) -> str | None:
    """Why ``gc`` takes this sandbox now, or None to keep it.

    ``is_ready`` reads the backend's ready mark fresh; it is called only after the owner was
    judged (see the module doc for why that order makes the answer safe).
    """
    owner_gone = stamp.owner_gone()
    expired = stamp.expires_at < now
    if not owner_gone and not expired:
        return None
    if not is_ready():
        if owner_gone:
            return f"orphan: its creating process {stamp.owner.pid} is gone"
        if not stamp.local and stamp.expires_at + REMOTE_CREATING_GRACE_S < now:
            return f"orphan: still creating {REMOTE_CREATING_GRACE_S:.0f} s after its expiry"
        return None  # being created by a live process: never touched
    if expired:
        return "expired"
    if stamp.lifetime == "owned":
        mark = resume_marks.read_mark_quietly(stamp.sandbox_id)
        if mark is not None and resume_marks.spares(mark, now) is not None:
            return None  # resumable (issue 45): kept until its window passes
        if mark is not None:
            return f"its owner process {stamp.owner.pid} is gone and its resume window passed"
        return f"its owner process {stamp.owner.pid} is gone"
    return None


def lifetime_of(detached: bool) -> Lifetime:
    """The lifetime label value for a spec's ``detached`` flag."""
    return "detached" if detached else "owned"
