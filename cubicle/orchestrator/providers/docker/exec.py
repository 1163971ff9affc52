"""The agent over the engine's exec stream: a bridge run by ``docker exec``, bytes demultiplexed.

The host never shares a folder or a socket path with a container. To reach the agent it asks the
engine to run :mod:`cubicle_guest.bridge` inside the container (``exec_create`` + ``exec_start``
with ``socket=True``: the HTTP connection is upgraded to a raw, bidirectional stream). What the host
writes reaches the bridge's stdin unchanged; what comes back is Docker's *multiplexed* stream
(the exec has no TTY, so no line discipline touches the bytes): frames of an 8-byte header —
stream (1 stdout, 2 stderr), three zero bytes, a big-endian u32 payload size — then the payload.
:class:`DockerStreamCodec` undoes that framing for the agent clients (sync and async alike: it is
a :class:`cubicle_guest.client.StreamCodec`); the bridge's stderr is kept (bounded) and told when
the stream ends, so "the agent is not listening" reaches the caller in the bridge's own words.

The same shape serves remote engines (``tcp://`` with TLS, ``ssh://``: the stream is relayed
through a local socket pair, :mod:`cubicle.orchestrator.providers.docker.relay`) and would serve a
Kubernetes exec; only the codec and the call that opens the stream differ.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
from collections.abc import Sequence
from typing import Any, Final

import docker
import docker.errors

from cubicle.orchestrator.providers.docker.relay import relay
from cubicle_guest.client import AgentConnectionError
from cubicle_guest.errors import ProtocolError

__all__ = ["DockerStreamCodec", "bridge_argv", "open_exec_socket"]

HEADER: Final = struct.Struct(">BxxxI")
STDOUT: Final = 1
STDERR: Final = 2
MAX_PAYLOAD: Final = 64 * 1024 * 1024
"""A stdcopy frame larger than this is not something the engine writes: the stream is broken."""
STDERR_KEEP: Final = 4096
"""How much of the bridge's stderr is kept for error messages (the last bytes)."""


class DockerStreamCodec:
    """Docker's multiplexed exec stream ↔ the agent's bytes
    (:class:`cubicle_guest.client.StreamCodec`).

    Input to the container is not framed (``encode`` is the identity). Output is demultiplexed:
    stdout payloads are returned, stderr payloads kept (the last :data:`STDERR_KEEP` bytes) for
    :meth:`closed_reason`. Any other stream number, or an impossible size, raises
    :class:`ProtocolError`.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._stderr = bytearray()

    def encode(self, data: bytes) -> bytes:
        return data

    def decode(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while len(self._buffer) >= HEADER.size:
            stream, size = HEADER.unpack_from(self._buffer)
            if stream not in (STDOUT, STDERR) or size > MAX_PAYLOAD:
                raise ProtocolError(
                    f"broken exec stream: frame header {bytes(self._buffer[: HEADER.size])!r} "
                    f"(stream {stream}, {size} bytes)"
                )
            end = HEADER.size + size
            if len(self._buffer) < end:
                break
            payload = self._buffer[HEADER.size : end]
            if stream == STDOUT:
                out += payload
            else:
                self._stderr += payload
                del self._stderr[:-STDERR_KEEP]
            del self._buffer[:end]
        return bytes(out)

    def closed_reason(self) -> str | None:
        text = self._stderr.decode("utf-8", "replace").strip()
        if self._buffer:
            text += f" (and {len(self._buffer)} bytes of a cut-off frame)"
        return text.strip() or None


def bridge_argv(
    python: str, agent_socket: str, *, wait_s: float, first_within_s: float | None = None
) -> list[str]:
    """The command that runs the bridge in the guest (``-I``: no cwd, no ``PYTHON*`` variables):
    it waits ``wait_s`` for the agent once spoken to, and, with ``first_within_s``, ends unused
    when not spoken to that long (:mod:`cubicle_guest.bridge`)."""
    argv = [
        python,
        "-I",
        "-m",
        "cubicle_guest.bridge",
        agent_socket,
        "--wait",
        f"{max(wait_s, 0.0):g}",
    ]
    if first_within_s is not None:
        argv += ["--first-within", f"{max(first_within_s, 0.0):g}"]
    return argv


def open_exec_socket(
    api: docker.APIClient, container_id: str, argv: Sequence[str], *, user: str, name: str
) -> socket.socket:
    """Run ``argv`` in the container with stdin attached; return the raw upgraded socket.

    The caller owns the socket. Reads from it are Docker's multiplexed stream
    (:class:`DockerStreamCodec`); writes go to the process's stdin; closing it ends stdin.

    :raises AgentConnectionError: the engine refused (container gone or not running).
    """
    try:
        exec_id = api.exec_create(
            container_id,
            list(argv),
            stdin=True,
            stdout=True,
            stderr=True,
            tty=False,
            user=user,
            workdir="/",
        )["Id"]
        raw: Any = api.exec_start(exec_id, socket=True, tty=False)
    except docker.errors.APIError as exc:
        raise AgentConnectionError(
            f"the engine could not start the agent bridge in {name}: {exc.explanation or exc}"
        ) from exc
    return _detach(raw, name)


def _detach(raw: Any, name: str) -> socket.socket:
    """Take the upgraded connection into a socket of our own.

    A local engine: docker-py returns the ``SocketIO`` under its HTTP response, whose objects
    all refer to one socket object. Detaching its descriptor leaves them holding a closed socket
    (closing or collecting them is then harmless) and gives the caller sole ownership.

    A TLS (``tcp://``) or ssh engine: the stream is an :class:`ssl.SSLSocket` or a paramiko
    channel, framed in Python; :func:`cubicle.orchestrator.providers.docker.relay.relay` puts a
    plain socket in front of it (the HTTP response stays referenced by the stream, as docker-py
    set).
    """
    inner = raw if isinstance(raw, socket.socket) else getattr(raw, "_sock", None)
    if isinstance(inner, ssl.SSLSocket) or _is_channel(raw):
        return relay(inner if isinstance(inner, ssl.SSLSocket) else raw, name)
    response = getattr(raw, "_response", None)
    try:
        if not isinstance(inner, socket.socket):
            raise AgentConnectionError(
                f"cannot reach the agent of {name}: the engine connection is a "
                f"{type(raw).__name__}, not a socket, a TLS socket or an ssh channel"
            )
        return socket.socket(fileno=inner.detach())
    finally:
        with contextlib.suppress(Exception):
            raw.close()
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


def _is_channel(raw: Any) -> bool:
    """A paramiko channel (an ssh:// engine), recognised without importing paramiko."""
    return type(raw).__module__.startswith("paramiko.") and hasattr(raw, "recv_ready")
