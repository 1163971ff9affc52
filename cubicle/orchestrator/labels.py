"""The labels cubicle puts on everything it creates on an engine — the one place they are defined.

Every container and network a provider creates gets its labels from :func:`create_labels`, and
``cubicle ls``/``gc``/``down`` find cubicle's objects only through :data:`SANDBOX` (never by
name), so nothing else on the engine is ever touched.

=========================  ====================================================================
``io.cubicle.sandbox``     the sandbox id (``dk-…``); present on every object of the sandbox
``io.cubicle.role``        ``guest`` (the desktop), ``egress`` (the allowlist proxy), ``network``,
                           ``claim`` (a warm pool claim marker, :mod:`cubicle.orchestrator.pool`)
``io.cubicle.owner-pid``   pid of the creating process (``0``: made before lifetimes existed)
``io.cubicle.owner-start`` that process's start time (clock ticks since boot; guards pid reuse)
``io.cubicle.owner-host``  host name of the creating process (gc only judges pids of this host)
``io.cubicle.lifetime``    ``owned`` (the creating process keeps it) or ``detached`` (``up``:
                           once ready, its TTL keeps it); see :mod:`cubicle.orchestrator.ownership`
``io.cubicle.created-at``  unix time, seconds
``io.cubicle.expires-at``  unix time, seconds; ``gc`` removes a ready sandbox after it
``io.cubicle.network``     the network policy text (``none``, ``allow:…``, ``open``)
``io.cubicle.screen``      ``WxH`` pixels
``io.cubicle.version``     cubicle's version
=========================  ====================================================================
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cubicle.orchestrator import __version__
from cubicle.orchestrator.errors import ConfigError

__all__ = [
    "CREATED_AT",
    "EXPIRES_AT",
    "LIFETIME",
    "NAMESPACE",
    "NETWORK",
    "OWNER_HOST",
    "OWNER_PID",
    "OWNER_START",
    "ROLE",
    "SANDBOX",
    "SCREEN",
    "VERSION",
    "Owner",
    "Role",
    "create_labels",
    "owner_alive",
    "process_start_ticks",
]

NAMESPACE = "io.cubicle."
SANDBOX = "io.cubicle.sandbox"
ROLE = "io.cubicle.role"
OWNER_PID = "io.cubicle.owner-pid"
OWNER_START = "io.cubicle.owner-start"
OWNER_HOST = "io.cubicle.owner-host"
CREATED_AT = "io.cubicle.created-at"
EXPIRES_AT = "io.cubicle.expires-at"
LIFETIME = "io.cubicle.lifetime"
NETWORK = "io.cubicle.network"
SCREEN = "io.cubicle.screen"
VERSION = "io.cubicle.version"

Role = Literal["guest", "egress", "network", "claim"]


def process_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


@dataclass(frozen=True)
class Owner:
    """The process that creates a sandbox (``pid`` 0 only on sandboxes made before lifetimes)."""

    pid: int
    start_ticks: int
    host: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, process_start_ticks(pid) or 0, socket.gethostname())


def owner_alive(labels: Mapping[str, str]) -> bool:
    """False only when the owner is a process on THIS host that has gone (or whose pid was reused).

    Detached sandboxes (pid 0) and sandboxes owned from other hosts count as alive; only their
    expiry removes them.
    """
    try:
        pid = int(labels.get(OWNER_PID, "0"))
        start = int(labels.get(OWNER_START, "0"))
    except ValueError:
        return False
    if pid <= 0 or labels.get(OWNER_HOST) != socket.gethostname():
        return True
    current = process_start_ticks(pid)
    if current is None:
        return False
    return start in (0, current)


def create_labels(
    sandbox_id: str,
    role: Role,
    *,
    owner: Owner,
    ttl_s: float,
    lifetime: Literal["owned", "detached"] = "owned",
    network: str,
    screen: tuple[int, int],
    extra: Mapping[str, str] | None = None,
    now: float | None = None,
) -> dict[str, str]:
    """The labels of one object of a sandbox. Returns a new dict; ``extra`` is not modified.

    :raises ConfigError: if ``extra`` uses the reserved ``io.cubicle.`` namespace.
    """
    reserved = sorted(key for key in (extra or {}) if key.startswith(NAMESPACE))
    if reserved:
        raise ConfigError(
            f"labels {', '.join(reserved)} are in cubicle's reserved namespace {NAMESPACE!r}; "
            "use another prefix"
        )
    created = time.time() if now is None else now
    return {
        **dict(extra or {}),
        SANDBOX: sandbox_id,
        ROLE: role,
        OWNER_PID: str(owner.pid),
        OWNER_START: str(owner.start_ticks),
        OWNER_HOST: owner.host,
        LIFETIME: lifetime,
        CREATED_AT: f"{created:.3f}",
        EXPIRES_AT: f"{created + ttl_s:.3f}",
        NETWORK: network,
        SCREEN: f"{screen[0]}x{screen[1]}",
        VERSION: __version__,
    }
