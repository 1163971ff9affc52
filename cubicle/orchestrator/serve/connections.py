"""Connection limits of ``cubicle serve``: a cap on open connections and a deadline for every
request head, so that no client without the token can exhaust the server (issue 38, SV11b).

What uvicorn (0.55, the h11 protocol) does and does not bound, and why it is not enough alone:

- ``limit_concurrency`` answers 503 once a *complete* head arrives while the connections or
  tasks are at the limit. It caps neither accepted connections nor their file descriptors (a
  client that never finishes a head is never counted against anything), and while an attacker
  holds the slots it refuses the token holder too. Not used.
- ``timeout_keep_alive`` (seconds) is armed only after a response was sent, and every byte
  received cancels it: a connection that never completes a head, or trickles a byte now and
  then, is kept forever. Kept (:data:`KEEP_ALIVE_S`) for idle keep-alive connections.
- ``h11_max_incomplete_event_size`` (bytes) bounds the size of a head (400 beyond), not its
  duration. Kept at h11's 16 KiB (:data:`MAX_HEAD_BYTES`).
- asyncio's accept loop, on ``EMFILE``, logs one error with a traceback for each of up to
  ``backlog`` attempts a second; :mod:`cubicle.orchestrator.serve.logs` bounds that log, and the
  cap here keeps the process below its descriptor limit so it does not happen.

What :class:`GuardedH11Protocol` adds (one :class:`ConnectionGuard` per server):

- **A cap**: at most ``max_connections`` connections are open. A connection accepted at the cap
  closes the open connection that has been *waiting* longest (waiting: no request in flight —
  an unfinished head or an idle keep-alive), so a client that sends its request at once, as
  every real client does, is served while others hold unfinished heads. When every open
  connection has a request in flight, the new one gets a plain 503 and is closed. Either way at
  most one warning a minute (:data:`NOTICE_INTERVAL_S`) says how many.
- **A head deadline**: a waiting connection must complete its next request head within
  ``head_timeout_s`` seconds of when it began waiting (it connected, or its previous response
  ended); bytes trickling in do not extend it. Then it is closed.

:func:`fd_budget` checks at start that the cap fits the process's descriptor limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import resource
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from cubicle.orchestrator.errors import ConfigError

__all__ = [
    "BACKLOG",
    "DEFAULT_HEAD_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
    "KEEP_ALIVE_S",
    "MAX_HEAD_BYTES",
    "ConnectionGuard",
    "ConnectionLimits",
    "GuardedH11Protocol",
    "fd_budget",
    "guarded_protocol",
    "raise_fd_limit",
]

log = logging.getLogger("cubicle.serve")

DEFAULT_MAX_CONNECTIONS = 128
"""Open connections (count). A single user's clients need a few: the ``openai`` client's pool
keeps up to 20 idle, a browser opens 6 per origin plus one per open event stream."""
DEFAULT_HEAD_TIMEOUT_S = 10.0
"""Seconds a waiting connection has to complete a request head (real clients send it at once)."""
KEEP_ALIVE_S = 5
"""uvicorn's ``timeout_keep_alive``: seconds an idle keep-alive connection that sends nothing
stays open (uvicorn's default)."""
MAX_HEAD_BYTES = 16 * 1024
"""Largest request head (bytes; h11's default); a larger one is answered 400."""
BACKLOG = 64
"""Largest listen backlog (connections); :attr:`ConnectionLimits.backlog` is the one used."""
NOTICE_INTERVAL_S = 60.0
"""At most one warning about the cap per this many seconds."""
FDS_PER_SESSION = 32
"""Descriptors a session may hold at once (engine connections, its folder's files, the origin
relay, a live view), counted by :func:`fd_budget`."""
FDS_RESERVE = 64
"""Descriptors kept for everything else (logs, the registry, the engine client's pool)."""

_REFUSAL_BODY = b"cubicle serve: every connection is busy (--max-connections)\n"
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)
"""What a connection accepted at the cap gets when no open connection is waiting."""


@dataclass(frozen=True)
class ConnectionLimits:
    """The server's connection limits (see the module doc)."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Open connections at most (count, at least 1)."""
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    """Seconds a waiting connection has to complete its next request head (> 0)."""

    @property
    def backlog(self) -> int:
        """The listen backlog (connections): :data:`BACKLOG`, at most half the cap. asyncio
        accepts up to this many sockets in one go before the guard sees any of them (so the
        descriptor budget counts it); below half the cap, such a burst cannot evict a connection
        that arrived with it and sends its head at once."""
        return max(1, min(BACKLOG, self.max_connections // 2))

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ConfigError(f"--max-connections {self.max_connections}: must be at least 1")
        if not (self.head_timeout_s > 0 and math.isfinite(self.head_timeout_s)):
            raise ConfigError(f"--head-timeout {self.head_timeout_s:g}: must be a positive number")


class ConnectionGuard:
    """The open connections of one server (event-loop thread only): admits, evicts, reports."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[GuardedH11Protocol, None] = {}
        self.evicted = 0
        """Waiting connections closed to admit a new one, since the last notice (count)."""
        self.refused = 0
        """Connections refused because every open one had a request in flight (count)."""
        self._last_notice = -math.inf

    def admit(self, conn: GuardedH11Protocol, now: float) -> bool:
        """Count ``conn`` in, closing the longest-waiting connection when at the cap.

        :param now: the loop's clock (seconds).
        :returns: ``False`` when every open connection has a request in flight (refuse it)."""
        if len(self.open) >= self.limits.max_connections:
            waiting = [c for c in self.open if c.waiting()]
            if not waiting:
                self.refused += 1
                self._notice(now)
                return False
            victim = min(waiting, key=lambda c: c.waiting_since)
            self.release(victim)
            victim.transport.close()
            self.evicted += 1
            self._notice(now)
        self.open[conn] = None
        return True

    def release(self, conn: GuardedH11Protocol) -> None:
        self.open.pop(conn, None)

    def _notice(self, now: float) -> None:
        if now - self._last_notice < NOTICE_INTERVAL_S:
            return
        self._last_notice = now
        log.warning(
            "cubicle serve: at the connection limit (%d, --max-connections): closed %d waiting "
            "connections and refused %d (all busy) since the last notice (at most one "
            "notice a minute)",
            self.limits.max_connections,
            self.evicted,
            self.refused,
        )
        self.evicted = self.refused = 0


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol under a :class:`ConnectionGuard` (the cap and the head deadline).

    Made per server by :func:`guarded_protocol`, which sets :attr:`guard`."""

    guard: ClassVar[ConnectionGuard]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.waiting_since = self.loop.time()
        """When this connection began waiting for a request head (loop clock, seconds)."""
        self._head_timer: asyncio.TimerHandle | None = None

    def waiting(self) -> bool:
        """No request in flight: a head not yet complete, or an idle keep-alive."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        super().connection_made(transport)
        if not self.guard.admit(self, self.loop.time()):
            transport.write(REFUSAL)
            transport.close()
            return
        self._wait_for_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._wait_for_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.release(self)
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _wait_for_head(self) -> None:
        self.waiting_since = self.loop.time()
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(
            self.guard.limits.head_timeout_s, self._head_deadline
        )

    def _head_deadline(self) -> None:
        self._head_timer = None
        if self.waiting() and not self.transport.is_closing():
            self.guard.release(self)
            self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """A :class:`GuardedH11Protocol` class with its own guard, for ``uvicorn.Config(http=...)``."""
    return type("ServeH11Protocol", (GuardedH11Protocol,), {"guard": ConnectionGuard(limits)})


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (where allowed); the soft one after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        # not allowed, e.g. an unlimited hard limit the kernel caps lower: the soft one stays
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _fds_open() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return FDS_RESERVE


def fd_budget(limits: ConnectionLimits, *, max_sessions: int, soft_limit: int) -> int:
    """The descriptors the server may need: those open now, ``max_connections``, one accept
    batch (:attr:`ConnectionLimits.backlog`), :data:`FDS_PER_SESSION` per session and
    :data:`FDS_RESERVE`.

    :raises ConfigError: the budget exceeds ``soft_limit`` (``RLIMIT_NOFILE``); the message names
        both numbers and what to lower."""
    need = (
        _fds_open()
        + limits.max_connections
        + limits.backlog
        + max_sessions * FDS_PER_SESSION
        + FDS_RESERVE
    )
    if need > soft_limit:
        raise ConfigError(
            f"--max-connections {limits.max_connections} and --max-sessions {max_sessions} need "
            f"about {need} file descriptors, but this process may open {soft_limit} "
            "(RLIMIT_NOFILE, its hard limit): lower them or raise the limit (ulimit -n)"
        )
    return need
