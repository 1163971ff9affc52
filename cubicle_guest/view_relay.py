"""The live view's guest end on the VM backend: VNC sessions of the desktop over the
virtio-serial port ``org.cubicle.view``, one :mod:`cubicle_guest.egress_mux` stream each.

The host (:mod:`cubicle.orchestrator.view.vm_channel`) opens a stream per viewer; its ``OPEN``
hello is the session's mode, ``view-only`` or ``control``. For each stream the relay starts
its own ``x11vnc -inetd`` (the argv of :func:`cubicle_guest.vnc.x11vnc_argv`: ``-viewonly`` for
``view-only``) on one end of a socket pair and carries the other end: the same session as the
Docker backend's ``python -m cubicle_guest.vnc``. Any other hello is refused (``CLOSE``), so
input is refused in the guest unless the host asked for control. When a stream ends, its
x11vnc sees its connection close and exits (it is killed if it has not within
:data:`STOP_TIMEOUT_S`). No TCP port is opened and no x11vnc runs while nobody watches::

    python -I -m cubicle_guest.view_relay --port /dev/vportNpM

``images/vm/cubicle-init`` starts it as the desktop user, with the port's device node (no udev:
it finds the port named :data:`VIEW_PORT_NAME` in sysfs). It imports only the standard library,
the mux and :mod:`cubicle_guest.vnc`: it starts during the boot. The port stays open for good: while
no host is connected its reads return 0 (the relay then ends every stream and waits for the
port's SIGIO, which the guest kernel sends when a host connects — ``O_ASYNC``, as the agent's
transport does — or at most :data:`HOST_ABSENT_S`); closing it would drop what a host that just
connected already sent. Idle, it wakes only every :data:`HOST_ABSENT_S`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Final

from cubicle_guest.egress_mux import Mux, MuxError
from cubicle_guest.vnc import x11vnc_argv

__all__ = ["CONTROL", "VIEW_ONLY", "VIEW_PORT_NAME", "main", "relay", "session"]

VIEW_PORT_NAME: Final = "org.cubicle.view"
"""The virtio-serial port of the live view (the domain's view channel)."""
VIEW_ONLY: Final = b"view-only"
CONTROL: Final = b"control"
HOST_ABSENT_S: Final = 5.0
"""The longest wait for a host without a SIGIO (a fallback: the signal ends the wait)."""
STOP_TIMEOUT_S: Final = 2.0
READ_CHUNK: Final = 65536


def _say(message: str) -> None:
    print(f"cubicle view relay: {message}", file=sys.stderr, flush=True)


async def session(hello: bytes, display: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Start one x11vnc for a stream with ``hello``; return the relay's end of its connection."""
    if hello not in (VIEW_ONLY, CONTROL):
        raise ValueError(f"unknown view mode {hello[:32]!r}")
    ours, theirs = socket.socketpair()
    try:
        process = await asyncio.create_subprocess_exec(
            *x11vnc_argv(display, view_only=hello == VIEW_ONLY),
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    reader, writer = await asyncio.open_connection(sock=ours, limit=1 << 20)
    task = asyncio.ensure_future(_reap(process, writer))
    _REAPERS.add(task)
    task.add_done_callback(_REAPERS.discard)
    return reader, writer


_REAPERS: set[asyncio.Task[None]] = set()


async def _reap(process: asyncio.subprocess.Process, writer: asyncio.StreamWriter) -> None:
    """Wait for the stream's x11vnc; once its connection is closed, give it
    :data:`STOP_TIMEOUT_S` to exit, then kill it."""
    with contextlib.suppress(asyncio.CancelledError):
        while process.returncode is None and not writer.is_closing():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), 1.0)
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    writer.close()


class _Port:
    """The port's descriptor (non-blocking, open for good) and one host connection at a time."""

    def __init__(self, device: str, woke: asyncio.Event) -> None:
        """Open ``device``; its SIGIO (a host connected, data arrived) sets ``woke`` (the
        handler is installed before the port may send one: SIGIO's default ends a process)."""
        self.woke = woke
        asyncio.get_running_loop().add_signal_handler(signal.SIGIO, woke.set)
        self.fd = os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETOWN, os.getpid())
            fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) | os.O_ASYNC)
        except OSError as exc:  # no async notification: hosts are seen every HOST_ABSENT_S
            _say(f"no SIGIO from {device} ({exc}): looking for a host every {HOST_ABSENT_S} s")

    def read(self) -> bytes | None:
        """What the port has: bytes, ``b""`` (no host connected), or None (a host, no data)."""
        try:
            return os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return None

    async def host(self) -> bytes:
        """Wait until a host is connected; return what it already sent (maybe nothing)."""
        while True:
            self.woke.clear()  # before the read: a SIGIO after it is not lost
            data = self.read()
            if data is None:
                return b""
            if data:
                return data
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woke.wait(), HOST_ABSENT_S)

    async def serve(self, first: bytes, display: str) -> None:
        """Serve one host connection (its frames from ``first`` on) until it ends."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        reader.feed_data(first)

        def readable() -> None:
            try:
                data = self.read()
            except OSError:
                data = b""
            if data is None:
                return
            if data:
                reader.feed_data(data)
            else:  # the host went away
                loop.remove_reader(self.fd)
                reader.feed_eof()

        write_file = os.fdopen(os.dup(self.fd), "wb", buffering=0)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, write_file
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        loop.add_reader(self.fd, readable)
        try:
            await Mux(reader, writer, lambda hello: session(hello, display)).run()
        except MuxError as exc:
            _say(f"the host sent garbage ({exc}); waiting for the next host")
        finally:
            loop.remove_reader(self.fd)
            transport.abort()  # what the gone host did not read is dropped


async def relay(device: str, display: str) -> None:
    """Serve the port's hosts one after the other, for ever."""
    port = _Port(device, asyncio.Event())
    _say(f"serving {device} (display {display})")
    while True:
        first = await port.host()
        # (the host's bytes were read up to its end: whatever comes next is the next host's)
        await port.serve(first, display)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cubicle guest live-view relay")
    parser.add_argument("--port", required=True, help=f"the device node of {VIEW_PORT_NAME}")
    args = parser.parse_args(argv)
    device = args.port
    display = os.environ.get("DISPLAY") or ":0"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(relay(device, display))
    return 0


if __name__ == "__main__":
    sys.exit(main())
