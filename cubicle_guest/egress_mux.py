"""Many connections over one byte stream: how a VM guest with no network card reaches the
host's egress proxy through a virtio-serial port, and how the host reaches the guest's VNC
sessions through another (standard library only; the host's proxy bundle,
:mod:`cubicle.egress.bundle`, ships this module too).

Egress: the guest side (:mod:`cubicle_guest.egress_relay`) accepts connections on
``127.0.0.1:PORT`` and opens a *stream* for each; the host side (the egress proxy's
``--channel-fd``) serves each stream as one client connection of the proxy. Live view: the host
(:mod:`cubicle.orchestrator.view.vm_channel`) opens a stream per viewer, the guest
(:mod:`cubicle_guest.view_relay`) serves each with its own x11vnc. The wire is a sequence of
frames::

    stream id (4 bytes, big-endian) | kind (1 byte) | payload length (4 bytes) | payload

Kinds: ``OPEN`` (the opener's side made stream *id*; on one carrier only one side opens; the
payload is the opener's *hello*, handed to the accepting side's opener: empty for egress, the
session's mode for the view; an ``OPEN`` of an id the accepting side still holds ends that old
stream first),
``DATA`` (payload, at most :data:`MAX_PAYLOAD` bytes), ``EOF`` (the sender will send no more
data on this stream: a half-close, which HTTP tunnels need), ``CLOSE`` (the stream is gone:
reset, or both directions ended). A frame for an unknown stream is ignored (it raced a
``CLOSE``); a malformed frame (unknown kind, oversized payload) ends the whole mux.

Flow control is the carrier's: a stream whose local peer does not read stalls the frames behind
it (the carrier is a local virtio port; a stalled stream is the guest's own problem).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["CLOSE", "DATA", "EOF", "HEADER", "MAX_PAYLOAD", "OPEN", "Mux", "MuxError"]

OPEN: Final = 0
DATA: Final = 1
EOF: Final = 2
CLOSE: Final = 3
HEADER: Final = struct.Struct(">IBI")
MAX_PAYLOAD: Final = 65536

Opener = Callable[[bytes], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
"""The accepting side's way to make the local end of a stream the other side opened, given the
``OPEN`` frame's hello. Raising :class:`OSError` or :class:`ValueError` refuses the stream
(answered with ``CLOSE``)."""


class MuxError(Exception):
    """The other side sent a frame this side cannot parse: the mux ends."""


@dataclass
class _Stream:
    writer: asyncio.StreamWriter
    sent_eof: bool = False
    got_eof: bool = False


class Mux:
    """One end of the carrier ``reader``/``writer``. ``accept`` (the host side) makes the local
    end of each stream the other side opens; without it, an ``OPEN`` is answered with
    ``CLOSE``. :meth:`run` reads frames until the carrier ends, then closes every stream."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        accept: Opener | None = None,
        *,
        first_id: int = 1,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._accept = accept
        self._streams: dict[int, _Stream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.next_id = first_id
        """The id :meth:`open` gives its next stream (a relay that reopens its port carries it
        over, so the host never sees an id of a stream it may still hold)."""

    def _send(self, stream_id: int, kind: int, payload: bytes = b"") -> None:
        if not self._writer.is_closing():
            self._writer.write(HEADER.pack(stream_id, kind, len(payload)) + payload)

    @property
    def stream_count(self) -> int:
        """How many streams are open (not yet ``CLOSE``d) on this end."""
        return len(self._streams)

    async def open(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: bytes = b""
    ) -> None:
        """Carry the local connection ``reader``/``writer`` as a new stream until it ends (one
        call per connection of the opening side); ``hello`` (at most :data:`MAX_PAYLOAD` bytes)
        goes to the accepting side's opener."""
        if len(hello) > MAX_PAYLOAD:
            raise ValueError(f"a hello of {len(hello)} bytes is over {MAX_PAYLOAD}")
        stream_id = self.next_id
        self.next_id = self.next_id % 0xFFFFFFFF + 1
        self._streams[stream_id] = _Stream(writer)
        self._send(stream_id, OPEN, hello)
        await self._pump(stream_id, reader)

    async def _pump(self, stream_id: int, reader: asyncio.StreamReader) -> None:
        """Local → carrier, until the local side's EOF (sent as ``EOF``) or an error
        (``CLOSE``)."""
        try:
            while data := await reader.read(MAX_PAYLOAD):
                if stream_id not in self._streams:
                    return
                self._send(stream_id, DATA, data)
                await self._writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            self._close(stream_id, tell=True)
            return
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.sent_eof = True
            self._send(stream_id, EOF)
            if stream.got_eof:
                self._close(stream_id, tell=True)
        with contextlib.suppress(OSError):
            await self._writer.drain()

    def _close(self, stream_id: int, *, tell: bool) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if tell:
            self._send(stream_id, CLOSE)
        stream.writer.close()

    async def run(self) -> None:
        """Serve frames until the carrier ends or sends garbage; then every stream is closed."""
        try:
            while True:
                try:
                    head = await self._reader.readexactly(HEADER.size)
                except (asyncio.IncompleteReadError, OSError):
                    return
                stream_id, kind, size = HEADER.unpack(head)
                if kind > CLOSE or size > MAX_PAYLOAD:
                    raise MuxError(f"bad frame: kind {kind}, {size} bytes for stream {stream_id}")
                try:
                    payload = await self._reader.readexactly(size) if size else b""
                except (asyncio.IncompleteReadError, OSError):
                    return
                await self._frame(stream_id, kind, payload)
        finally:
            for stream_id in list(self._streams):
                self._close(stream_id, tell=False)
            for task in list(self._tasks):
                task.cancel()

    async def _frame(self, stream_id: int, kind: int, payload: bytes) -> None:
        if kind == OPEN:
            await self._accepted(stream_id, payload)
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # raced a CLOSE
        try:
            if kind == DATA:
                stream.writer.write(payload)
                await stream.writer.drain()
            elif kind == EOF:
                stream.got_eof = True
                if stream.writer.can_write_eof():
                    stream.writer.write_eof()
                if stream.sent_eof:
                    self._close(stream_id, tell=True)
            else:
                self._close(stream_id, tell=False)
        except OSError:
            self._close(stream_id, tell=True)

    async def _accepted(self, stream_id: int, hello: bytes) -> None:
        if self._accept is None:
            self._send(stream_id, CLOSE)
            return
        # an id still open here: the opener forgot that stream (its end restarted); it is dead
        self._close(stream_id, tell=False)
        try:
            reader, writer = await self._accept(hello)
        except (OSError, ValueError):
            self._send(stream_id, CLOSE)
            return
        self._streams[stream_id] = _Stream(writer)
        task = asyncio.ensure_future(self._pump(stream_id, reader))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
