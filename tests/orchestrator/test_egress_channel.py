"""The egress proxy's VM channel (``--channel-fd``): many client connections carried as
:mod:`cubicle_guest.egress_mux` streams over one connection, as a VM guest's virtio-serial port
carries them. The real bundled proxy runs as a process; the test plays the hypervisor (it
connects to the channel socket) and the guest (the relay's listener, in a thread)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from cubicle.egress.bundle import write_bundle
from cubicle_guest.egress_mux import DATA, HEADER, OPEN, Mux
from tests.orchestrator.support import http_server

READY_LINES = 20


@contextmanager
def _proxy(tmp_path: Path, policy: str) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """The bundled proxy with only a channel socket (no TCP listener); yields its path."""
    path = tmp_path / "channel.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    argv = [sys.executable, "-I", str(write_bundle(tmp_path)), "--policy", policy]
    argv += ["--channel-fd", str(listener.fileno()), "--label", "vm-0c4a77e100"]
    proxy = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, pass_fds=(listener.fileno(),))
    listener.close()
    try:
        assert proxy.stdout is not None
        first = json.loads(proxy.stdout.readline())
        assert first["event"] == "listening" and first["listen"] == "channel", first
        yield path, proxy
    finally:
        proxy.terminate()
        proxy.wait(10)
        if proxy.stdout is not None:
            proxy.stdout.close()


@contextmanager
def _guest_relay(channel: Path) -> Iterator[int]:
    """The guest side: a listener on 127.0.0.1 whose connections go over one channel
    connection (what cubicle_guest.egress_relay does over the virtio port); yields its port."""
    loop = asyncio.new_event_loop()
    ready: list[int] = []
    carrier: list[asyncio.StreamWriter] = []
    started = threading.Event()

    async def main() -> None:
        reader, writer = await asyncio.open_unix_connection(str(channel))
        carrier.append(writer)
        mux = Mux(reader, writer)
        server = await asyncio.start_server(mux.open, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        started.set()
        async with server:
            await mux.run()  # until the carrier is closed
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:  # the streams' pumps, ending now that their connections are closed
            await asyncio.wait(others, timeout=10)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        assert started.wait(10), "the relay did not start"
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(carrier[0].close)
        thread.join(10)
        assert not thread.is_alive(), "the relay did not stop"
        loop.close()


def _get(proxy_port: int, url: str) -> tuple[int, str]:
    proxies = {"http": f"http://127.0.0.1:{proxy_port}"}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies))
    try:
        with opener.open(url, timeout=15) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _tunnel(proxy_port: int, target: str) -> bytes:
    """CONNECT, then one HTTP/1.0 request in the tunnel, half-closed; all bytes that come back."""
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=15) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                return head
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            return head
        sock.sendall(b"GET /tunnelled HTTP/1.0\r\nHost: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)  # the half-close travels as an EOF frame
        body = b""
        while chunk := sock.recv(4096):
            body += chunk
        return body


def test_many_connections_share_one_channel_and_the_rules_hold(tmp_path: Path) -> None:
    with http_server("allowed") as allowed, http_server("other") as other:
        policy = f"allow:localhost:{allowed.port}"
        with _proxy(tmp_path, policy) as (channel, _proxy_process), _guest_relay(channel) as port:
            urls = [f"http://localhost:{allowed.port}/ok{i}" for i in range(8)]
            urls.append(f"http://localhost:{other.port}/no")
            with ThreadPoolExecutor(9) as pool:  # concurrent streams on one channel
                answers = list(pool.map(lambda url: _get(port, url), urls))
            tunnelled = _tunnel(port, f"localhost:{allowed.port}")
            refused = _tunnel(port, f"localhost:{other.port}")
    assert answers[:8] == [(200, "allowed")] * 8
    assert answers[8][0] == 403
    assert sorted(allowed.paths) == sorted([f"/ok{i}" for i in range(8)] + ["/tunnelled"])
    assert other.paths == []
    assert tunnelled.startswith(b"HTTP/1.1 200") and tunnelled.endswith(b"allowed"), tunnelled
    assert refused.startswith(b"HTTP/1.1 403"), refused


def test_a_malformed_frame_ends_that_channel_connection_only(tmp_path: Path) -> None:
    with (
        http_server("allowed") as allowed,
        _proxy(tmp_path, f"allow:localhost:{allowed.port}") as (channel, proxy),
    ):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bad:
            bad.connect(str(channel))
            bad.sendall(HEADER.pack(1, 9, 0))  # kind 9 does not exist
            bad.settimeout(10)
            assert bad.recv(1) == b""  # the proxy closed this channel connection
        with _guest_relay(channel) as port:  # and still serves a new one
            assert _get(port, f"http://localhost:{allowed.port}/after") == (200, "allowed")
        assert proxy.poll() is None


def _frames_until(sock: socket.socket, stream_id: int, needle: bytes) -> bytes:
    """Read frames from ``sock`` until stream ``stream_id``'s data holds ``needle``."""
    data = b""
    while needle not in data:
        head = sock.recv(HEADER.size, socket.MSG_WAITALL)
        assert len(head) == HEADER.size, f"the channel ended; got {data!r}"
        sid, kind, size = HEADER.unpack(head)
        payload = sock.recv(size, socket.MSG_WAITALL) if size else b""
        if sid == stream_id and kind == DATA:
            data += payload
    return data


def test_a_reused_stream_id_replaces_the_stream_the_guest_forgot(tmp_path: Path) -> None:
    """A relay that reopened its port starts afresh; if it ever sends ``OPEN`` for an id the
    proxy still holds, the old stream is dropped and the new one served."""
    with (
        http_server("allowed") as allowed,
        _proxy(tmp_path, f"allow:localhost:{allowed.port}") as (channel, _proxy_process),
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as carrier,
    ):
        carrier.settimeout(15)
        carrier.connect(str(channel))
        for path in ("/first", "/second"):
            request = (
                f"GET http://localhost:{allowed.port}{path} HTTP/1.1\r\n"
                f"Host: localhost:{allowed.port}\r\n\r\n"
            ).encode()
            carrier.sendall(HEADER.pack(1, OPEN, 0) + HEADER.pack(1, DATA, len(request)) + request)
            assert _frames_until(carrier, 1, b"allowed").startswith(b"HTTP/1.1 200")
    assert allowed.paths == ["/first", "/second"]
