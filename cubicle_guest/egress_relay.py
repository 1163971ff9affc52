"""The guest's way out under ``allow:``/``block:``/``ask:`` on the VM backend: a listener on
``127.0.0.1:PORT`` whose every connection is carried to the host's egress proxy as one stream of
:mod:`cubicle_guest.egress_mux` over the virtio-serial port ``org.cubicle.egress``.

The guest has no network card at all; its ``HTTP(S)_PROXY`` is ``http://127.0.0.1:PORT``
(``images/vm/cubicle-init`` starts this relay as the desktop user when the kernel command line
says ``cubicle.egress=PORT``). Whatever the relay is sent reaches only the proxy, which judges
every request by the sandbox's rules::

    python -I -m cubicle_guest.egress_relay --listen 127.0.0.1:3128 \\
        --port /dev/virtio-ports/org.cubicle.egress

When the host side of the port goes away (the proxy ended), the relay closes every connection
and waits for the port to be usable again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Final

from cubicle_guest.egress_mux import Mux
from cubicle_guest.transport import find_virtio_port

__all__ = ["EGRESS_PORT_NAME", "main", "relay"]

EGRESS_PORT_NAME: Final = "org.cubicle.egress"
"""The virtio-serial port the host's egress proxy is on (the domain's second channel)."""
REOPEN_S: Final = 1.0
WAIT_PORT_S: Final = 10.0


async def _carrier(device: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The port as asyncio streams (a character device: asyncio's pipe transports take it; one
    descriptor for reading, a duplicate for writing, since a port opens only once)."""
    loop = asyncio.get_running_loop()
    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
    read_file = os.fdopen(fd, "rb", buffering=0)
    write_file = os.fdopen(os.dup(fd), "wb", buffering=0)
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_file)
    flow = asyncio.streams.FlowControlMixin
    transport, protocol = await loop.connect_write_pipe(flow, write_file)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer


async def relay(host: str, port: int, device: str) -> None:
    """Listen on ``host:port`` and carry each connection over ``device``, for ever. A connection
    that arrives while the port is being (re)opened waits for it (up to :data:`WAIT_PORT_S`)."""
    current: list[Mux] = []
    carried = asyncio.Event()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(carried.wait(), WAIT_PORT_S)
        except TimeoutError:
            writer.close()
            return
        await current[0].open(reader, writer)

    server = await asyncio.start_server(accepted, host, port)
    print(f"cubicle egress relay: {host}:{port} -> {device}", file=sys.stderr, flush=True)
    async with server:
        while True:
            try:
                reader, writer = await _carrier(device)
            except OSError as exc:
                print(f"cubicle egress relay: {device}: {exc}", file=sys.stderr, flush=True)
                await asyncio.sleep(REOPEN_S)
                continue
            mux = Mux(reader, writer, first_id=current[0].next_id if current else 1)
            current[:] = [mux]
            carried.set()
            await mux.run()
            carried.clear()
            with contextlib.suppress(OSError):
                writer.close()
            print(
                f"cubicle egress relay: {device}: the host side closed; reopening",
                file=sys.stderr,
                flush=True,
            )
            await asyncio.sleep(REOPEN_S)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cubicle guest egress relay")
    parser.add_argument("--listen", default="127.0.0.1:3128", help="HOST:PORT")
    parser.add_argument("--port", default=f"/dev/virtio-ports/{EGRESS_PORT_NAME}")
    args = parser.parse_args(argv)
    host, _, port_text = args.listen.rpartition(":")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        parser.error(f"--listen must be HOST:PORT, got {args.listen!r}")
    device = find_virtio_port(args.port)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(relay(host, int(port_text), device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
