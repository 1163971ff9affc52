"""Asynchronous client for the guest agent protocol over an anyio byte stream.

The async twin of :class:`guest.client.AgentClient`: same frames (:mod:`guest.protocol`'s
``encode_frame``/``FrameDecoder``), same errors (``GuestError``, ``AgentTimeout``,
``AgentConnectionError``, ``ProtocolError``), same stale-reply skipping. One request is in flight
at a time (an :class:`anyio.Lock` serialises callers). Every request runs under
:func:`anyio.fail_after`; a request that times out, is cancelled, or reads a broken frame leaves
the client *broken* (the stream may hold half a reply) and later calls raise
``AgentConnectionError`` — reconnect.

The caller owns the client and closes it (``await aclose()`` or ``async with``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import ByteStream

from guest import protocol
from guest.client import (
    DEFAULT_TIMEOUT_S,
    AgentConnectionError,
    AgentTimeout,
    Reply,
    StreamCodec,
)
from guest.errors import ProtocolError

__all__ = ["AsyncAgentClient", "connect_unix_async"]

_RECEIVE_BYTES = 1024 * 1024


class AsyncAgentClient:
    """Request/reply client over a connected anyio byte stream (takes ownership of it).

    :param stream: a connected stream (e.g. from :func:`anyio.connect_unix`).
    :param name: how errors name the peer (a sandbox id, a socket path).
    :param timeout: default deadline of each request, seconds.
    :param codec: the carrier's framing around the agent's bytes (see
        :class:`guest.client.StreamCodec`; None: the stream carries them as they are).
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
        self._codec = codec
        self._name = name
        self._timeout = timeout
        self._decoder = protocol.FrameDecoder()
        self._pending: list[protocol.Frame] = []
        self._ids = itertools.count(1)
        self._lock = anyio.Lock()
        self._broken: str | None = None
        self._closed = False
        self.hello_result: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self._name

    async def aclose(self) -> None:
        """Close the stream. Idempotent; never touches the guest."""
        if not self._closed:
            self._closed = True
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
        args = {"protocol": protocol.PROTOCOL_VERSION, "client": client}
        result = (await self.call("hello", args, timeout=timeout)).result
        if result.get("protocol") != protocol.PROTOCOL_VERSION:
            raise ProtocolError(
                f"{self._name} speaks protocol {result.get('protocol')!r}, "
                f"this host speaks {protocol.PROTOCOL_VERSION}"
            )
        self.hello_result = result
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
        checked = protocol.validate_args(op, dict(args or {}), blob)
        async with self._lock:
            self._check_usable()
            request_id = next(self._ids)
            frame = protocol.encode_frame(protocol.request(request_id, op, checked), blob)
            limit = self._timeout if timeout is None else timeout
            completed = False
            try:
                with anyio.fail_after(limit):
                    await self._send(frame, op)
                    reply = await self._receive(request_id, op)
                completed = True
            except TimeoutError:
                raise AgentTimeout(
                    f"{self._name} did not answer {op} within {limit:.1f} s"
                ) from None
            finally:
                if not completed:
                    self._broken = f"{op} did not complete"
        return Reply(protocol.parse_reply(reply.message, op=op), reply.blob)

    def _check_usable(self) -> None:
        if self._closed:
            raise AgentConnectionError(f"connection to {self._name} is closed")
        if self._broken is not None:
            raise AgentConnectionError(
                f"connection to {self._name} is broken by an earlier failure ({self._broken}); "
                "reconnect"
            )

    async def _send(self, data: bytes, op: str) -> None:
        try:
            await self._stream.send(self._codec.encode(data) if self._codec else data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise AgentConnectionError(f"sending {op} to {self._name} failed: {exc!r}") from exc

    async def _receive(self, request_id: int, op: str) -> protocol.Frame:
        while True:
            while self._pending:
                frame = self._pending.pop(0)
                if frame.message.get("id") == request_id:
                    return frame
            try:
                data = await self._stream.receive(_RECEIVE_BYTES)
            except anyio.EndOfStream:
                reason = self._codec.closed_reason() if self._codec else None
                raise AgentConnectionError(
                    f"{self._name} closed the connection before answering {op}"
                    + (f": {reason}" if reason else "")
                ) from None
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise AgentConnectionError(
                    f"receiving the reply to {op} from {self._name} failed: {exc!r}"
                ) from exc
            if self._codec:
                data = self._codec.decode(data)
            self._pending.extend(self._decoder.feed(data))


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
