"""The live view's stream layer without a VM: a mux stream's ``OPEN`` hello reaches the accepting
side, and the guest's view relay refuses a session whose hello is no mode it knows (before it
starts anything). The x11vnc sessions themselves run in tests/view/test_view_vm.py."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from cubicle_guest import view_relay
from cubicle_guest.egress_mux import MAX_PAYLOAD, Mux, Opener


async def _carried(
    accept: Opener | None, body: Callable[[Mux, Mux, list[asyncio.Task[None]]], Awaitable[None]]
) -> None:
    """Run ``body(host, guest, tasks)`` with a host mux (opens) and a guest mux (accepts with
    ``accept``) over a socket pair; then close the carrier and wait for every task (``body``
    adds its own to ``tasks``)."""
    a, b = socket.socketpair()
    host_reader, host_writer = await asyncio.open_connection(sock=a)
    guest_reader, guest_writer = await asyncio.open_connection(sock=b)
    host, guest = Mux(host_reader, host_writer), Mux(guest_reader, guest_writer, accept)
    tasks = [asyncio.ensure_future(host.run()), asyncio.ensure_future(guest.run())]
    try:
        await body(host, guest, tasks)
    finally:
        host_writer.close()
        guest_writer.close()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)


async def _viewer(host: Mux, hello: bytes, tasks: list[asyncio.Task[None]]) -> socket.socket:
    """Open a stream with ``hello``; return the viewer's end of it (non-blocking)."""
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    tasks.append(asyncio.ensure_future(host.open(reader, writer, hello)))
    theirs.setblocking(False)
    return theirs


def test_the_open_frame_carries_the_hello_to_the_accepting_side() -> None:
    heard: list[bytes] = []
    got: list[bytes] = []

    async def accept(hello: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        heard.append(hello)
        ours, theirs = socket.socketpair()
        theirs.sendall(b"hello back")
        theirs.close()
        return await asyncio.open_connection(sock=ours)

    async def body(host: Mux, guest: Mux, tasks: list[asyncio.Task[None]]) -> None:
        with await _viewer(host, b"control", tasks) as viewer:
            got.append(await asyncio.wait_for(asyncio.get_running_loop().sock_recv(viewer, 99), 10))

    asyncio.run(_carried(accept, body))
    assert heard == [b"control"]
    assert got == [b"hello back"]


def test_the_view_relay_refuses_a_mode_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="unknown view mode b'take-everything'"):
        asyncio.run(view_relay.session(b"take-everything", ":99"))


def test_a_refused_stream_is_closed_and_the_mux_goes_on() -> None:
    got: list[bytes] = []
    heard: list[bytes] = []

    async def accept(hello: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        heard.append(hello)
        if hello != b"control":
            raise ValueError(f"unknown view mode {hello!r}")
        ours, theirs = socket.socketpair()
        theirs.sendall(b"RFB")
        theirs.close()
        return await asyncio.open_connection(sock=ours)

    async def body(host: Mux, guest: Mux, tasks: list[asyncio.Task[None]]) -> None:
        loop = asyncio.get_running_loop()
        for hello in (b"take-everything", b"control"):
            with await _viewer(host, hello, tasks) as viewer:
                got.append(await asyncio.wait_for(loop.sock_recv(viewer, 99), 10))

    asyncio.run(_carried(accept, body))
    assert heard == [b"take-everything", b"control"]
    assert got == [b"", b"RFB"], "the refused stream was carried, or it ended the mux"


def test_a_hello_over_the_frame_limit_is_refused() -> None:
    async def body(host: Mux, guest: Mux, tasks: list[asyncio.Task[None]]) -> None:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        with theirs, pytest.raises(ValueError, match="hello of"):
            await host.open(reader, writer, b"x" * (MAX_PAYLOAD + 1))
        writer.close()

    asyncio.run(_carried(None, body))
