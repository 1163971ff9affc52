"""Asynchronous client for the guest agent protocol over an anyio byte stream.

The async twin of :class:`cubicle_guest.client.AgentClient`, sharing its I/O-free half
(:class:`cubicle_guest.exchange.Exchange`: request ids and frames, stale-reply skipping, the
``hello`` check, the broken/closed state) and its errors (``GuestError``, ``AgentTimeout``,
``AgentConnectionError``, ``ProtocolError``); it only moves bytes. One request is in flight
at a time (an :class:`anyio.Lock` serialises callers). Every request runs under
:func:`anyio.fail_after`; a request that times out, is cancelled, or reads a broken frame leaves
the client *broken* (the stream may hold half a reply) and later calls raise
``AgentConnectionError`` — reconnect.

The caller owns the client and closes it (``await aclose()`` or ``async with``).
"""

from __future__ import annotations

import os
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import ByteStream

from cubicle_guest.client_ops import AgentOps
from cubicle_guest.exchange import (
    DEFAULT_TIMEOUT_S,
    AgentConnectionError,
    AgentTimeout,
    Exchange,
    Reply,
    StreamCodec,
)
from cubicle_guest.protocol import Frame

__all__ = ["AsyncAgentClient", "connect_unix_async"]

_RECEIVE_BYTES = 1024 * 1024


class AsyncAgentClient(AgentOps[Coroutine[Any, Any, Reply]]):
    """Request/reply client over a connected anyio byte stream (takes ownership of it).

    :param stream: a connected stream (e.g. from :func:`anyio.connect_unix`).
    :param name: how errors name the peer (a sandbox id, a socket path).
    :param timeout: default deadline of each request, seconds.
    :param codec: the carrier's framing around the agent's bytes (see
        :class:`cubicle_guest.client.StreamCodec`; None: the stream carries them as they are).
    """

    def __init__(
        self,
        stream: ByteStream,
        *,
        name: str = "agent",
        timeout: float = DEFAULT_TIMEOUT_S,
        codec: StreamCodec | None = None,
    ) -> None:
        self._stream = stream
        self._exchange = Exchange(name, codec)
        self._timeout = timeout
        self._lock = anyio.Lock()
        self.hello_result: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self._exchange.name

    async def aclose(self) -> None:
        """Close the stream. Idempotent; never touches the guest."""
        if not self._exchange.closed:
            self._exchange.closed = True
            await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def hello(
        self, *, timeout: float | None = None, client: str = "cubicle"
    ) -> dict[str, Any]:
        """Handshake: check the protocol version and learn the screen size and operations."""
        result = (await self.call("hello", Exchange.hello_args(client), timeout=timeout)).result
        self.hello_result = self._exchange.check_hello(result)
        return result

    async def call(
        self,
        op: str,
        args: Mapping[str, Any] | None = None,
        *,
        blob: bytes = b"",
        timeout: float | None = None,
    ) -> Reply:
        """Send one request and wait for its reply (whole round trip within ``timeout`` s).

        :raises GuestError: the agent answered with an error (the client stays usable).
        :raises AgentTimeout: no reply in time (the client is then broken).
        :raises AgentConnectionError: the stream is closed or broken.
        :raises ProtocolError: the reply was malformed (the client is then broken).
        """
        checked = Exchange.checked_args(op, args, blob)
        exchange = self._exchange
        async with self._lock:
            exchange.check_usable()
            request_id, data = exchange.request(op, checked, blob)
            limit = self._timeout if timeout is None else timeout
            completed = False
            try:
                with anyio.fail_after(limit):
                    await self._send(data, op)
                    frame = await self._receive(request_id, op)
                completed = True
            except TimeoutError:
                raise AgentTimeout(
                    f"{self.name} did not answer {op} within {limit:.1f} s"
                ) from None
            finally:
                if not completed:
                    exchange.broken = f"{op} did not complete"
        return Exchange.reply(frame, op)

    async def _send(self, data: bytes, op: str) -> None:
        try:
            await self._stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise AgentConnectionError(f"sending {op} to {self.name} failed: {exc!r}") from exc

    async def _receive(self, request_id: int, op: str) -> Frame:
        while (frame := self._exchange.take(request_id)) is None:
            try:
                data = await self._stream.receive(_RECEIVE_BYTES)
            except anyio.EndOfStream:
                raise self._exchange.ended(op) from None
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise AgentConnectionError(
                    f"receiving the reply to {op} from {self.name} failed: {exc!r}"
                ) from exc
            self._exchange.feed(data)
        return frame


async def connect_unix_async(
    path: str | os.PathLike[str],
    *,
    timeout: float = 10.0,
    name: str | None = None,
    request_timeout: float = DEFAULT_TIMEOUT_S,
) -> AsyncAgentClient:
    """Connect to an agent's unix socket, retrying until it accepts or ``timeout`` s pass.

    Does not send ``hello``.

    :raises AgentConnectionError: nothing accepted at ``path`` in time.
    """
    last: OSError | None = None
    with anyio.move_on_after(timeout):
        while True:
            try:
                stream = await anyio.connect_unix(os.fspath(path))
            except OSError as exc:
                last = exc
                await anyio.sleep(0.05)
                continue
            return AsyncAgentClient(stream, name=name or os.fspath(path), timeout=request_timeout)
    raise AgentConnectionError(
        f"no agent accepted connections at {os.fspath(path)} within {timeout:.1f} s "
        f"(last error: {last})"
    )
