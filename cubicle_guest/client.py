"""Blocking client for the guest agent protocol (:mod:`cubicle_guest.protocol`).

One :class:`AgentClient` owns one connected stream and sends one request at a time. The stream is
a socket: a unix socket to the agent, the unix socket a hypervisor exposes for a virtio-serial
port, or an engine's exec stream to a bridge inside the guest (:mod:`cubicle_guest.bridge`) — the
last frames the agent's bytes in its own way, which a :class:`StreamCodec` undoes. Every call
has a deadline; a call that times out or hits a broken frame leaves the client *broken* (the
stream may hold half a reply), and later calls raise :class:`AgentConnectionError` — reconnect.

The caller owns the client and closes it (``close()`` or ``with``). Closing never touches the
guest. What does not touch the socket (ids, frames, stale replies, the handshake check, the
broken state) is :class:`cubicle_guest.exchange.Exchange`, shared with the async client.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

from cubicle_guest.client_ops import AgentOps
from cubicle_guest.errors import ProtocolError
from cubicle_guest.exchange import (
    DEFAULT_TIMEOUT_S,
    AgentConnectionError,
    AgentTimeout,
    Exchange,
    Reply,
    StreamCodec,
)
from cubicle_guest.protocol import Frame
from cubicle_guest.waiting import Deadline, poll

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AgentClient",
    "AgentConnectionError",
    "AgentTimeout",
    "Reply",
    "StreamCodec",
    "connect_unix",
    "open_unix",
]

_RECEIVE_BYTES = 1024 * 1024


class AgentClient(AgentOps[Reply]):
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
        self._exchange = Exchange(name, codec)
        self._timeout = timeout
        self.hello_result: dict[str, Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the stream. Idempotent."""
        if not self._exchange.closed:
            self._exchange.closed = True
            with contextlib.suppress(OSError):
                self._sock.close()

    def adopt(self, other: AgentClient) -> None:
        """Carry on over ``other``'s connection: this client's stream is closed and replaced by
        ``other``'s (its ``hello`` result too), so everyone holding this client keeps using it.
        ``other`` is left closed; its owner may close it again (a no-op). Used where a channel
        takes one connection at a time and a paused holder lets it go (the hand-over gate)."""
        self.close()
        self._sock, self._exchange = other._sock, other._exchange
        self.hello_result = other.hello_result
        other._exchange = Exchange(other.name)
        other._exchange.closed = True

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
        return self._exchange.name

    # -- requests --------------------------------------------------------------------------

    def hello(self, *, timeout: float | None = None, client: str = "cubicle") -> dict[str, Any]:
        """Handshake: check the protocol version and learn the screen size and operations."""
        result = self.call("hello", Exchange.hello_args(client), timeout=timeout).result
        self.hello_result = self._exchange.check_hello(result)
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
        exchange = self._exchange
        exchange.check_usable()
        request_id, data = exchange.request(op, Exchange.checked_args(op, args, blob), blob)
        deadline = Deadline(self._timeout if timeout is None else timeout)
        try:
            self._send(data, deadline, op)
            frame = self._receive(request_id, deadline, op)
        except (AgentTimeout, AgentConnectionError, ProtocolError) as exc:
            exchange.broken = str(exc)
            raise
        return Exchange.reply(frame, op)

    def pipeline(
        self,
        calls: Iterable[tuple[str, Mapping[str, Any] | None, bytes]],
        *,
        depth: int = 2,
        timeout: float | None = None,
    ) -> Iterator[Reply]:
        """Send ``calls`` (``(op, args, blob)``) with up to ``depth`` requests in flight and
        yield their replies in order: the agent answers one connection's requests in order, so
        it starts the next while this side reads a reply (file chunks: the channel stays busy).
        Only for calls whose requests or whose replies are small (a chunk's request or its
        reply), so neither side blocks sending while the other does.

        :param timeout: seconds for each request's sending and each reply's wait (default: the
            client's).
        :raises GuestError: at the first error reply; the replies still in flight are skipped
            by the next call, and the client stays usable.
        :raises AgentTimeout, AgentConnectionError, ProtocolError: as :meth:`call` (the client
            is then broken).
        """
        exchange = self._exchange
        exchange.check_usable()
        wait = self._timeout if timeout is None else timeout
        waiting = iter(calls)
        in_flight: deque[tuple[int, str]] = deque()

        def send_next() -> None:
            call = next(waiting, None)
            if call is None:
                return
            op, args, blob = call
            request_id, data = exchange.request(op, Exchange.checked_args(op, args, blob), blob)
            try:
                self._send(data, Deadline(wait), op)
            except (AgentTimeout, AgentConnectionError, ProtocolError) as exc:
                exchange.broken = str(exc)
                raise
            in_flight.append((request_id, op))

        for _ in range(max(1, depth)):
            send_next()
        while in_flight:
            request_id, op = in_flight.popleft()
            try:
                frame = self._receive(request_id, Deadline(wait), op)
            except (AgentTimeout, AgentConnectionError, ProtocolError) as exc:
                exchange.broken = str(exc)
                raise
            reply = Exchange.reply(frame, op)
            send_next()
            yield reply

    # -- internals -------------------------------------------------------------------------

    def _send(self, data: bytes, deadline: Deadline, op: str) -> None:
        view = memoryview(data)
        while view:
            self._sock.settimeout(self._remaining(deadline, op, "sending"))
            try:
                sent = self._sock.send(view)
            except TimeoutError:
                raise self._timeout_error(op, "sending") from None
            except OSError as exc:
                raise AgentConnectionError(f"sending {op} to {self.name} failed: {exc}") from exc
            view = view[sent:]

    def _receive(self, request_id: int, deadline: Deadline, op: str) -> Frame:
        while (frame := self._exchange.take(request_id)) is None:
            self._sock.settimeout(self._remaining(deadline, op, "waiting for the reply"))
            try:
                data = self._sock.recv(_RECEIVE_BYTES)
            except TimeoutError:
                raise self._timeout_error(op, "waiting for the reply") from None
            except OSError as exc:
                raise AgentConnectionError(
                    f"receiving the reply to {op} from {self.name} failed: {exc}"
                ) from exc
            if not data:
                raise self._exchange.ended(op)
            self._exchange.feed(data)
        return frame

    def _remaining(self, deadline: Deadline, op: str, stage: str) -> float:
        if deadline.expired:
            raise self._timeout_error(op, stage)
        return deadline.remaining()

    def _timeout_error(self, op: str, stage: str) -> AgentTimeout:
        return AgentTimeout(f"{self.name} did not answer {op} in time ({stage}; deadline passed)")


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
    deadline = Deadline(timeout)
    last: OSError | None = None
    for _ in poll(deadline, 0.05):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(deadline.remaining(low=0.05))
            sock.connect(os.fspath(path))
            sock.settimeout(None)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise AgentConnectionError(
        f"no agent accepted connections at {os.fspath(path)} within {timeout:.1f} s "
        f"(last error: {last})"
    )
