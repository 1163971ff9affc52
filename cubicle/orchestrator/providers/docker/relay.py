"""A plain socket in front of an exec stream that is not one (TLS engines, ssh engines).

The agent clients (sync and anyio) need a kernel socket. A local engine's upgraded exec
connection is one (:func:`cubicle.orchestrator.providers.docker.exec.open_exec_socket` hands over
its descriptor); over ``tcp://`` with TLS it is an :class:`ssl.SSLSocket`, and over ``ssh://`` a
paramiko channel — both do their framing in Python. :func:`relay` gives the caller one end of a
``socketpair`` and moves bytes between the other end and the engine's stream in one daemon
thread, with non-blocking I/O and ``select`` (one thread, so a TLS object is never read and
written from two threads at once).

Ends: when the engine's side ends, whatever was read is delivered and the caller's socket reads
end-of-file (so the codec can say why). When the caller closes its socket, the engine stream is
closed (ending the bridge in the guest). Buffers are bounded (:data:`BUFFER_LIMIT` each way).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
from typing import Any, Final, Protocol

__all__ = ["BUFFER_LIMIT", "relay"]

BUFFER_LIMIT: Final = 4 * 1024 * 1024
CHUNK: Final = 256 * 1024
SEND_POLL_S: Final = 0.005
"""How often a full ssh send window is polled (paramiko has no descriptor for it)."""


class _Stream(Protocol):
    """What an SSLSocket and a paramiko Channel both offer."""

    def recv(self, size: int) -> bytes: ...

    def send(self, data: bytes) -> int: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...

    def settimeout(self, value: float | None) -> None: ...


_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError, TimeoutError)


def relay(stream: Any, name: str) -> socket.socket:
    """Return a socket whose peer is ``stream`` (an SSLSocket or paramiko Channel); a daemon
    thread relays until either side ends. The caller owns the returned socket; ``stream`` now
    belongs to the relay, which closes it."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    stream.settimeout(0.0)
    thread = threading.Thread(
        target=_run, args=(stream, theirs), name=f"cubicle-relay-{name}", daemon=True
    )
    thread.start()
    return ours


def _polls_send(stream: _Stream) -> bool:
    """A paramiko channel: its ``fileno`` is a pipe that only signals input."""
    return hasattr(stream, "send_ready")


def _pending(stream: _Stream) -> bool:
    """Bytes already decrypted/received but not yet read (``select`` cannot see them)."""
    pending = getattr(stream, "pending", None)  # SSLSocket
    if pending is not None:
        return bool(pending())
    ready = getattr(stream, "recv_ready", None)  # paramiko Channel
    return bool(ready()) if ready is not None else False


def _run(stream: _Stream, local: socket.socket) -> None:
    to_engine = bytearray()
    to_local = bytearray()
    engine_open = True
    local_open = True
    try:
        while local_open and (engine_open or to_local):
            readers: list[Any] = []
            writers: list[Any] = []
            readable: list[Any]
            writable: list[Any]
            if engine_open and len(to_local) < BUFFER_LIMIT:
                readers.append(stream)
            if len(to_engine) < BUFFER_LIMIT:
                readers.append(local)
            polled = _polls_send(stream)
            if to_engine and engine_open and not polled:
                writers.append(stream)
            if to_local:
                writers.append(local)
            if engine_open and _pending(stream) and stream in readers:
                readable, writable = [stream], []
            else:
                # a channel's descriptor only signals input: poll its send window instead
                wait = SEND_POLL_S if (polled and to_engine and engine_open) else None
                readable, writable, _ = select.select(readers, writers, [], wait)
            if polled and to_engine and engine_open and stream.send_ready():  # type: ignore[attr-defined]
                writable.append(stream)
            if stream in readable:
                try:
                    data = stream.recv(CHUNK)
                    if data:
                        to_local += data
                    else:
                        engine_open = False
                except _WOULD_BLOCK:
                    pass
                except OSError:
                    engine_open = False
            if local in readable:
                try:
                    got: bytes | None = local.recv(CHUNK)
                except _WOULD_BLOCK:
                    got = None
                except OSError:
                    got = b""
                if got == b"":
                    local_open = False  # the caller closed: end the exec stream
                elif got:
                    to_engine += got
            if stream in writable and to_engine:
                try:
                    sent = stream.send(bytes(to_engine[:CHUNK]))
                    del to_engine[:sent]
                except _WOULD_BLOCK:
                    pass
                except OSError:
                    engine_open = False
            if local in writable and to_local:
                try:
                    sent = local.send(to_local[:CHUNK])
                    del to_local[:sent]
                except _WOULD_BLOCK:
                    pass
                except OSError:
                    local_open = False
            if not engine_open:
                to_engine.clear()
        if local_open and not to_local:
            with contextlib.suppress(OSError):
                local.shutdown(socket.SHUT_WR)  # the caller reads end-of-file
            _drain_until_closed(local)
    finally:
        _close(stream)
        local.close()


def _close(stream: _Stream) -> None:
    """Close the engine's stream for good. A socket that HTTP reader objects still refer to
    only closes when they do, so its descriptor is taken and closed here (no TLS goodbye: the
    engine reads end-of-file, which ends the exec's stdin just the same)."""
    if isinstance(stream, socket.socket):
        with contextlib.suppress(OSError):
            os.close(stream.detach())
    with contextlib.suppress(Exception):
        stream.close()
    response = getattr(stream, "_response", None)  # kept alive by docker-py until now
    if response is not None:
        with contextlib.suppress(Exception):
            response.close()


def _drain_until_closed(local: socket.socket) -> None:
    """After the engine's side ended: discard what the caller still writes until it closes."""
    local.setblocking(True)
    with contextlib.suppress(OSError):
        while local.recv(CHUNK):
            pass
