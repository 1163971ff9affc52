"""The I/O-free half of the host-side agent clients: one place for what the blocking
:class:`cubicle_guest.client.AgentClient` and the async
:class:`cubicle.drivers.async_client.AsyncAgentClient` both do around their reads and writes.

An :class:`Exchange` numbers requests and encodes them (through the carrier's
:class:`StreamCodec`), feeds received bytes to the frame decoder, hands back the reply of a given
request while skipping stale ones (replies the guest queued for an earlier connection), checks the
``hello`` handshake, and keeps the *closed* / *broken* state with the errors it implies. The
clients only move bytes and keep time.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cubicle_guest import protocol
from cubicle_guest.errors import CubicleError, ProtocolError

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AgentConnectionError",
    "AgentTimeout",
    "Exchange",
    "Reply",
    "StreamCodec",
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


class Exchange:
    """Request/reply bookkeeping of one stream to an agent (no I/O).

    :param name: how errors name the peer (a sandbox id, a socket path).
    :param codec: the carrier's framing around the agent's bytes (None: none).
    """

    def __init__(self, name: str, codec: StreamCodec | None = None) -> None:
        self.name = name
        self._codec = codec
        self._decoder = protocol.FrameDecoder()
        self._pending: list[protocol.Frame] = []
        self._ids = itertools.count(1)
        self.broken: str | None = None
        """Why the stream can no longer be used (it may hold half a reply), or None."""
        self.closed = False

    def check_usable(self) -> None:
        """:raises AgentConnectionError: the stream is closed or broken."""
        if self.closed:
            raise AgentConnectionError(f"connection to {self.name} is closed")
        if self.broken is not None:
            raise AgentConnectionError(
                f"connection to {self.name} is broken by an earlier failure ({self.broken}); "
                "reconnect"
            )

    @staticmethod
    def checked_args(op: str, args: Mapping[str, Any] | None, blob: bytes) -> dict[str, Any]:
        """``args`` checked against the protocol (:func:`cubicle_guest.protocol.validate_args`)."""
        return protocol.validate_args(op, dict(args or {}), blob)

    def request(self, op: str, args: dict[str, Any], blob: bytes) -> tuple[int, bytes]:
        """A new request id and the bytes to send for it (already checked ``args``)."""
        request_id = next(self._ids)
        frame = protocol.encode_frame(protocol.request(request_id, op, args), blob)
        return request_id, self._codec.encode(frame) if self._codec else frame

    def feed(self, data: bytes) -> None:
        """Bytes received from the stream (carrier framing included).

        :raises ProtocolError: a frame (or the carrier's framing) is malformed.
        """
        if self._codec:
            data = self._codec.decode(data)
        self._pending.extend(self._decoder.feed(data))

    def take(self, request_id: int) -> protocol.Frame | None:
        """The reply to ``request_id`` if it has arrived; stale replies before it are dropped."""
        while self._pending:
            frame = self._pending.pop(0)
            if frame.message.get("id") == request_id:
                return frame
        return None

    def ended(self, op: str) -> AgentConnectionError:
        """The error for a stream that ended before the reply to ``op`` (with the carrier's
        reason when it gave one)."""
        reason = self._codec.closed_reason() if self._codec else None
        return AgentConnectionError(
            f"{self.name} closed the connection before answering {op}"
            + (f": {reason}" if reason else "")
        )

    @staticmethod
    def reply(frame: protocol.Frame, op: str) -> Reply:
        """The :class:`Reply` of a reply frame.

        :raises GuestError: the agent answered with an error.
        """
        return Reply(protocol.parse_reply(frame.message, op=op), frame.blob)

    @staticmethod
    def hello_args(client: str) -> dict[str, Any]:
        """The arguments of the ``hello`` handshake."""
        return {"protocol": protocol.PROTOCOL_VERSION, "client": client}

    def check_hello(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` of ``hello`` if the agent speaks our protocol version.

        :raises ProtocolError: it speaks another.
        """
        if result.get("protocol") != protocol.PROTOCOL_VERSION:
            raise ProtocolError(
                f"{self.name} speaks protocol {result.get('protocol')!r}, "
                f"this host speaks {protocol.PROTOCOL_VERSION}"
            )
        return result
