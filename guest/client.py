"""Blocking client for the guest agent protocol (:mod:`guest.protocol`).

One :class:`AgentClient` owns one connected stream and sends one request at a time. The stream is
a socket: a unix socket to the agent, the unix socket a hypervisor exposes for a virtio-serial
port, or an engine's exec stream to a bridge inside the guest (:mod:`guest.bridge`) — the last
frames the agent's bytes in its own way, which a :class:`StreamCodec` undoes. Every call
has a deadline; a call that times out or hits a broken frame leaves the client *broken* (the
stream may hold half a reply), and later calls raise :class:`AgentConnectionError` — reconnect.

The caller owns the client and closes it (``close()`` or ``with``). Closing never touches the
guest.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

from guest import protocol
from guest.errors import CubicleError, ProtocolError

__all__ = [
    "AgentClient",
    "AgentConnectionError",
    "AgentTimeout",
    "Reply",
    "StreamCodec",
    "connect_unix",
    "open_unix",
]

DEFAULT_TIMEOUT_S = 30.0


class AgentConnectionError(CubicleError, ConnectionError):
    """The stream to the agent could not be opened, was closed, or is broken."""


class AgentTimeout(CubicleError, TimeoutError):
    """The agent did not answer within the deadline."""


class StreamCodec(Protocol):
    """How a carrier stream wraps the agent's bytes (e.g. Docker's multiplexed exec stream).

    The clients (sync and async) call :meth:`encode` on every chunk they send, :meth:`decode` on
    every chunk they receive, and :meth:`closed_reason` when the stream ends, so a transport adds
    its framing without the clients knowing which transport it is. A codec is stateful and
    belongs to one stream.
    """

    def encode(self, data: bytes) -> bytes:
        """The bytes to put on the carrier for ``data`` of the agent protocol."""
        ...

    def decode(self, data: bytes) -> bytes:
        """The agent-protocol bytes carried in ``data`` (possibly ``b""``).

        :raises ProtocolError: the carrier's own framing is broken.
        """
        ...

    def closed_reason(self) -> str | None:
        """Why the far end stopped, when the carrier said (a bridge's error line), else None."""
        ...


@dataclass(frozen=True)
class Reply:
    """A successful reply: the ``result`` object and the binary blob (``b""`` if none)."""

    result: dict[str, Any]
    blob: bytes = b""


class AgentClient:
    """Request/reply client over a connected stream socket.

    :param sock: a connected stream socket; the client takes ownership and closes it.
    :param name: how errors name the peer (a sandbox id, a socket path).
    :param timeout: default deadline of each request, seconds.
    :param codec: the carrier's framing around the agent's bytes (None: the socket carries them
        as they are).
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        name: str = "agent",
        timeout: float = DEFAULT_TIMEOUT_S,
        codec: StreamCodec | None = None,
    ) -> None:
        self._sock = sock
        self._codec = codec
        self._name = name
        self._timeout = timeout
        self._decoder = protocol.FrameDecoder()
        self._pending: list[protocol.Frame] = []
        self._ids = itertools.count(1)
        self._broken: str | None = None
        self._closed = False
        self.hello_result: dict[str, Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the stream. Idempotent."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def name(self) -> str:
        return self._name

    # -- requests --------------------------------------------------------------------------

    def hello(self, *, timeout: float | None = None, client: str = "cubicle") -> dict[str, Any]:
        """Handshake: check the protocol version and learn the screen size and operations."""
        result = self.call(
            "hello", {"protocol": protocol.PROTOCOL_VERSION, "client": client}, timeout=timeout
        ).result
        if result.get("protocol") != protocol.PROTOCOL_VERSION:
            raise ProtocolError(
                f"{self._name} speaks protocol {result.get('protocol')!r}, "
                f"this host speaks {protocol.PROTOCOL_VERSION}"
            )
        self.hello_result = result
        return result

    def call(
        self,
        op: str,
        args: Mapping[str, Any] | None = None,
        *,
        blob: bytes = b"",
        timeout: float | None = None,
    ) -> Reply:
        """Send one request and wait for its reply.

        :param timeout: seconds for the whole round trip (default: the client's).
        :raises GuestError: the agent answered with an error (the client stays usable).
        :raises AgentTimeout: no reply in time (the client is then broken).
        :raises AgentConnectionError: the stream is closed or broken.
        :raises ProtocolError: the reply was malformed (the client is then broken).
        """
        self._check_usable()
        args = protocol.validate_args(op, dict(args or {}), blob)
        request_id = next(self._ids)
        frame = protocol.encode_frame(protocol.request(request_id, op, args), blob)
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        try:
            self._send(frame, deadline, op)
            reply = self._receive(request_id, deadline, op)
        except (AgentTimeout, AgentConnectionError, ProtocolError) as exc:
            self._broken = str(exc)
            raise
        return Reply(protocol.parse_reply(reply.message, op=op), reply.blob)

    # -- internals -------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise AgentConnectionError(f"connection to {self._name} is closed")
        if self._broken is not None:
            raise AgentConnectionError(
                f"connection to {self._name} is broken by an earlier failure "
                f"({self._broken}); reconnect"
            )

    def _send(self, data: bytes, deadline: float, op: str) -> None:
        view = memoryview(self._codec.encode(data) if self._codec else data)
        while view:
            self._sock.settimeout(self._remaining(deadline, op, "sending"))
            try:
                sent = self._sock.send(view)
            except TimeoutError:
                raise self._timeout_error(op, "sending") from None
            except OSError as exc:
                raise AgentConnectionError(f"sending {op} to {self._name} failed: {exc}") from exc
            view = view[sent:]

    def _receive(self, request_id: int, deadline: float, op: str) -> protocol.Frame:
        while True:
            while self._pending:
                frame = self._pending.pop(0)
                if frame.message.get("id") == request_id:
                    return frame
                # a stale reply (e.g. to a request queued before the guest opened its port)
            self._sock.settimeout(self._remaining(deadline, op, "waiting for the reply"))
            try:
                data = self._sock.recv(1024 * 1024)
            except TimeoutError:
                raise self._timeout_error(op, "waiting for the reply") from None
            except OSError as exc:
                raise AgentConnectionError(
                    f"receiving the reply to {op} from {self._name} failed: {exc}"
                ) from exc
            if not data:
                reason = self._codec.closed_reason() if self._codec else None
                raise AgentConnectionError(
                    f"{self._name} closed the connection before answering {op}"
                    + (f": {reason}" if reason else "")
                )
            if self._codec:
                data = self._codec.decode(data)
            self._pending.extend(self._decoder.feed(data))

    def _remaining(self, deadline: float, op: str, stage: str) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout_error(op, stage)
        return remaining

    def _timeout_error(self, op: str, stage: str) -> AgentTimeout:
        return AgentTimeout(f"{self._name} did not answer {op} in time ({stage}; deadline passed)")


def connect_unix(
    path: str | os.PathLike[str],
    *,
    timeout: float = 10.0,
    name: str | None = None,
    request_timeout: float = DEFAULT_TIMEOUT_S,
) -> AgentClient:
    """Connect to an agent's unix socket, retrying until it exists and accepts or ``timeout``.

    Does not send ``hello``; call :meth:`AgentClient.hello`.

    :raises AgentConnectionError: nothing accepted at ``path`` within ``timeout`` seconds.
    """
    sock = open_unix(path, timeout=timeout)
    return AgentClient(sock, name=name or os.fspath(path), timeout=request_timeout)


def open_unix(path: str | os.PathLike[str], *, timeout: float = 10.0) -> socket.socket:
    """A stream socket connected to ``path``, retrying until it accepts or ``timeout`` s pass.

    :raises AgentConnectionError: nothing accepted at ``path`` within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            sock.connect(os.fspath(path))
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
        if time.monotonic() >= deadline:
            raise AgentConnectionError(
                f"no agent accepted connections at {os.fspath(path)} within {timeout:.1f} s "
                f"(last error: {last})"
            )
        time.sleep(0.05)
