"""``cubicle serve`` under clients without the token (issue 38: SV11b, SV6, SV2) and a client
making desktops without end (SV7), against the real server in a subprocess over real sockets.

The token holder's calls go through the real ``openai`` client; the attacker's are raw sockets
(what an attacker sends is not what a well-behaved client can be made to send).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import openai
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.serve.body import MAX_JSON_DEPTH
from cubicle.orchestrator.serve.logs import BURST
from tests.orchestrator.support import leftovers
from tests.serve.support import DRILL_ENV
from tests.support.serve_process import TOKEN, Server, start_server

pytestmark = pytest.mark.attack

PARTIAL_HEAD = b"GET /v1/agents/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
"""A request head that never ends (no blank line)."""


def address(server: Server) -> tuple[str, int]:
    host, port = server.origin.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def raw_request(server: Server, head: bytes, body: bytes = b"") -> tuple[int, bytes, bytes]:
    """Send one request as bytes; ``(status, head, body)`` of the answer (read to the close)."""
    with socket.create_connection(address(server), timeout=30) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    top, _, rest = answer.partition(b"\r\n\r\n")
    return int(top.split()[1]), top, rest


def post_head(path: str, length: int, host: bytes = b"127.0.0.1", auth: bool = True) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1".encode(),
        b"Host: " + host,
        b"Content-Type: application/json",
        f"Content-Length: {length}".encode(),
        b"Connection: close",
    ]
    if auth:
        lines.append(f"Authorization: Bearer {TOKEN}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset); never blocks."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        while chunk := sock.recv(65536):
            del chunk
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
    except ConnectionError:
        pass
    return True


def fd_count(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server for requests that create no sandbox."""
    started = start_server(tmp_path_factory.mktemp("serve") / "data")
    try:
        yield started
    finally:
        started.stop()


# -- SV11b: connections --------------------------------------------------------------------------

FD_LIMIT = 384
"""The attacked server's RLIMIT_NOFILE (soft and hard): the attack opens more sockets than this."""
ATTACK_SOCKETS = 450


class Attacker:
    """Keeps ``count`` connections open, each with an unfinished head, reopening what the server
    closes, until :meth:`stop` (a thread; every socket closed at the end)."""

    def __init__(self, server: Server, count: int) -> None:
        self.server = server
        self.count = count
        self.socks: list[socket.socket] = []
        self.opened = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> None:
        try:
            sock = socket.create_connection(address(self.server), timeout=2)
            sock.sendall(PARTIAL_HEAD)
        except OSError:  # the backlog is full, or it was closed at once: try again later
            return
        self.socks.append(sock)
        self.opened += 1

    def fill(self) -> None:
        while len(self.socks) < self.count and not self.stopping.is_set():
            self._open()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.socks = [s for s in self.socks if not self._dead(s)]
            self.fill()
            self.stopping.wait(0.05)

    @staticmethod
    def _dead(sock: socket.socket) -> bool:
        if closed_by_peer(sock):
            sock.close()
            return True
        return False

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=30)
        for sock in self.socks:
            sock.close()
        self.socks.clear()


def test_unfinished_heads_do_not_lock_out_the_token_holder(tmp_path: Path) -> None:
    """SV11b: more unfinished request heads than the server has file descriptors. The server
    keeps its descriptors below the limit, answers the token holder within seconds while the
    attack goes on, and does not log per attempt (on cdce854: EMFILE, every call timed out, and
    the accept loop logged megabytes)."""
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("wb") as stderr:
        server = start_server(
            tmp_path / "data",
            "--max-sessions",
            "1",
            stderr=stderr,
            nofile=FD_LIMIT,
        )
    attacker = Attacker(server, ATTACK_SOCKETS)
    try:
        attacker.fill()  # all of them at once first: more than the server's descriptor limit
        assert attacker.opened >= FD_LIMIT
        attacker.thread.start()
        # the SDK's default retries: an idle pooled connection the server closed just as it was
        # reused is retried, as for any client of any server
        client = openai.OpenAI(base_url=server.base_url, api_key=TOKEN, timeout=5)
        server.clients.append(client)
        for _ in range(5):
            started = time.monotonic()
            assert client.beta.agents.sessions.list().data == []
            assert time.monotonic() - started < 5
            assert fd_count(server.process.pid) < FD_LIMIT - 64
        assert server.process.poll() is None
        assert attacker.opened > ATTACK_SOCKETS  # the server kept closing unfinished heads
    finally:
        attacker.stop()
        server.stop()
    log = stderr_path.read_bytes()
    assert len(log) < 16 * 1024, log[-2000:]
    assert b"connection limit (128" in log


def test_slow_and_idle_connections_are_closed_at_the_head_deadline(tmp_path: Path) -> None:
    """SV11b, the slow ways to hold a connection: nothing sent, half a head, a head trickled a
    byte at a time, an answered request whose body trickles on, an idle keep-alive. Each is
    closed once ``--head-timeout`` (1 s) has passed; a token holder's request is unaffected."""
    server = start_server(tmp_path / "data", "--head-timeout", "1")
    socks: dict[str, socket.socket] = {}
    try:
        for name in ("silent", "half head", "trickled head", "trickled body", "keep-alive"):
            socks[name] = socket.create_connection(address(server), timeout=5)
        socks["half head"].sendall(PARTIAL_HEAD)
        socks["trickled head"].sendall(b"G")
        # answered at once (401: no token) while its body keeps coming
        socks["trickled body"].sendall(
            post_head("/v1/agents/sessions", 10_000, auth=False).replace(
                b"Connection: close", b"Connection: keep-alive"
            )
        )
        socks["keep-alive"].sendall(
            b"GET /v1/agents/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        started = time.monotonic()
        trickle = iter(b"ET /v1/agents/sessions HTTP/1.1\r\nX-Slow: " + b"x" * 1000)
        open_at: dict[str, float] = {}
        while time.monotonic() - started < 4 and len(open_at) < len(socks):
            for name, sock in socks.items():
                if name not in open_at and closed_by_peer(sock):
                    open_at[name] = time.monotonic() - started
            for name in ("trickled head", "trickled body"):
                if name not in open_at:
                    with_byte = bytes([next(trickle)]) if name == "trickled head" else b"x"
                    socks[name].sendall(with_byte)
            time.sleep(0.2)  # the trickle's pace; the loop is bounded by the 4 s above
        assert sorted(open_at) == sorted(socks), (
            f"still open after 4 s: {set(socks) - set(open_at)}"
        )
        assert all(0.8 < at < 3 for at in open_at.values()), open_at
        client = server.client()
        assert client.beta.agents.sessions.list().data == []
    finally:
        for sock in socks.values():
            sock.close()
        server.stop()


def test_bad_requests_are_not_logged_one_by_one(tmp_path: Path) -> None:
    """SV11b, the log: 300 malformed requests and 300 unsupported upgrades (uvicorn warns about
    each) leave at most a few lines on the server's stderr, the last saying how many were
    dropped (on cdce854: two lines and more for each)."""
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("wb") as stderr:
        server = start_server(tmp_path / "data", stderr=stderr)
    try:
        malformed = b"GET /\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        upgrade = (
            b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: upgrade, close\r\n"
            b"Upgrade: websocket\r\n\r\n"
        )
        for n in range(600):
            status, _, _ = raw_request(server, upgrade if n % 2 else malformed)
            assert status in (400, 401)
    finally:
        server.stop()
    lines = stderr_path.read_text().splitlines()
    assert len(lines) <= 2 * BURST + 4, lines[:8]


# -- SV6: nested JSON ----------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [200_000, MAX_JSON_DEPTH + 1])
def test_deeply_nested_body_is_a_400(plain_server: Server, depth: int) -> None:
    """SV6: a body nested deeper than the server parses is refused with a 400 in the API's error
    shape naming the nesting (on cdce854 the 200,000-deep array was a 500)."""
    body = b"[" * depth + b"]" * depth
    status, head, answer = raw_request(
        plain_server, post_head("/v1/agents/sessions", len(body)), body
    )
    assert status == 400, answer[:500]
    error = json.loads(answer)["error"]
    assert error["code"] == "json_too_deep"
    assert f"deeper than {MAX_JSON_DEPTH} levels" in error["message"]
    assert b"x-should-retry: false" in head.lower()


def test_nesting_within_the_limit_is_parsed(plain_server: Server) -> None:
    """The limit refuses only what is deeper: a body nested to it is parsed and judged on its
    fields (here: an unknown field)."""
    inner: Any = []
    for _ in range(MAX_JSON_DEPTH - 2):
        inner = [inner]
    body = json.dumps({"nested": inner}).encode()
    status, _, answer = raw_request(plain_server, post_head("/v1/agents/sessions", len(body)), body)
    assert status == 400
    assert json.loads(answer)["error"]["param"] == "nested"


# -- SV2: the Host header ------------------------------------------------------------------------


def test_a_request_for_another_host_is_refused(plain_server: Server) -> None:
    """SV2: a loopback server answers only its own names (a DNS-rebound page names its own)."""
    _, port = address(plain_server)
    for host in (b"rebound.example", b"rebound.example:%d" % port, b"10.0.0.1"):
        head = post_head("/v1/agents/sessions", 2, host=host)
        status, _, answer = raw_request(plain_server, head, b"{}")
        assert status == 400, (host, answer)
        assert json.loads(answer)["error"]["code"] == "invalid_host"
    for host in (b"127.0.0.1:%d" % port, b"localhost:%d" % port, b"localhost"):
        status, _, answer = raw_request(plain_server, post_head("/v1/x", 2, host=host), b"{}")
        assert status == 501, (host, answer)  # reached the API (an endpoint it does not serve)


# -- SV7: the session cap ------------------------------------------------------------------------


def test_sessions_beyond_the_cap_are_refused(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """SV7: with ``--max-sessions 1`` a second create is a 429 that the ``openai`` client does
    not retry, and it made nothing: one sandbox, one session folder (on cdce854 one client made
    10 desktops back to back)."""
    server = start_server(tmp_path / "data", "--max-sessions", "1")
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key=TOKEN, timeout=60)  # retries on
        server.clients.append(client)
        first = client.beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-drill"}
        )
        started = time.monotonic()
        with pytest.raises(openai.RateLimitError) as refused:
            client.beta.agents.sessions.create(
                environment=DRILL_ENV, agent={"model": "cubicle-drill"}
            )
        assert time.monotonic() - started < 5  # not retried with back-off
        assert refused.value.code == "session_limit_reached"
        assert "at most 1 sessions" in refused.value.message
        assert refused.value.response.headers["x-should-retry"] == "false"
        assert [p.name for p in (server.data_dir / "sessions").iterdir()] == [first.id]
        assert [s.id for s in client.beta.agents.sessions.list().data] == [first.id]
        sandboxes = {
            c.labels[L.SANDBOX]
            for c in engine.containers.list(
                all=True, filters={"label": f"{L.OWNER_PID}={server.process.pid}"}
            )
        }
        assert len(sandboxes) <= 1, sandboxes
        client.beta.agents.sessions.delete(first.id)
    finally:
        server.stop()
        left = leftovers(engine, {L.OWNER_PID: str(server.process.pid)})
        assert not left, f"cubicle serve left objects behind: {left}"
