"""Attacks on the egress proxy, each against the real proxy (its bundle, run standalone on
127.0.0.1) with local upstream servers and real sockets.

Issue 15, rows 12-14: every request on a connection is judged and logged, the Host header cannot
smuggle another origin, a malformed port is refused (not a crash). Issue 38: PX4 — a guarded
destination (a name under a domain rule or a block list, an ask approval) never reaches a
private address, in any form, and the address connected to is the one checked; A7c — the 64 KiB
request-head limit is exact; AQ3 — a refusal does not tell the guest who refused. Names resolve
through the proxy's ``--hosts`` file (its resolution path, with the answers a test needs).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from cubicle.egress import origins
from cubicle.egress import proxy as px
from cubicle.egress import upstream as guard
from cubicle.orchestrator.origin_questions import OriginQuestions
from cubicle.orchestrator.provider import AgentStream
from tests.orchestrator.support import http_server
from tests.support.egress import WAIT_S, egress_proxy, free_port, statuses, upstream
from tests.support.listener import Listener, host_addresses

pytestmark = [pytest.mark.attack]


@pytest.mark.parametrize(
    "head",
    [
        b"CONNECT a:\xb2 HTTP/1.1\r\nHost: a\r\n\r\n",  # '\xb2' is '²': str.isdigit() says yes
        b"CONNECT 127.0.0.1:4\xb3 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT [::1]:\xb9 HTTP/1.1\r\nHost: a\r\n\r\n",
    ],
)
def test_row12_non_ascii_port_digits_are_refused_and_logged(head: bytes) -> None:
    with upstream("allowed") as allowed, egress_proxy(f"127.0.0.1:{allowed.port}") as proxy:
        reply = proxy.exchange(head)
        assert statuses(reply) == [400], reply
        [decision] = proxy.decisions(1)
        assert decision["decision"] == "refuse", decision
        # the proxy still serves (a crash must not take it down either)
        ok = proxy.exchange(
            f"GET http://127.0.0.1:{allowed.port}/after HTTP/1.1\r\nHost: x\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert statuses(ok) == [200], ok
    assert allowed.paths == ["/after"]


def test_row13_host_header_is_replaced_by_the_target() -> None:
    with upstream("allowed") as allowed, egress_proxy(f"127.0.0.1:{allowed.port}") as proxy:
        reply = proxy.exchange(
            f"GET http://127.0.0.1:{allowed.port}/x HTTP/1.1\r\nHost: evil.test\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert statuses(reply) == [200], reply
        [decision] = proxy.decisions(1)
    assert [(s.path, s.host) for s in allowed.seen] == [("/x", f"127.0.0.1:{allowed.port}")]
    assert decision["decision"] == "allow"
    assert "evil.test" in str(decision["reason"]), decision  # the rewrite is on record


def test_row13_host_header_of_the_default_port() -> None:
    """A Host without the port of a default-port target is replaced by the target's authority
    too (here the target names the port; the Host names another one)."""
    with upstream("allowed") as allowed, egress_proxy(f"127.0.0.1:{allowed.port}") as proxy:
        reply = proxy.exchange(
            f"GET http://127.0.0.1:{allowed.port}/y HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        assert statuses(reply) == [200], reply
    assert [s.host for s in allowed.seen] == [f"127.0.0.1:{allowed.port}"]


def test_row14_pipelined_requests_are_each_judged_and_logged() -> None:
    with (
        upstream("allowed") as allowed,
        upstream("other") as other,
        egress_proxy(f"127.0.0.1:{allowed.port}") as proxy,
    ):
        pipelined = (
            f"GET http://127.0.0.1:{allowed.port}/one HTTP/1.1\r\nHost: a\r\n\r\n"
            f"GET http://127.0.0.1:{other.port}/two HTTP/1.1\r\nHost: a\r\n\r\n"
        ).encode()
        reply = proxy.exchange(pipelined)
        decisions = proxy.decisions(2)
    assert statuses(reply) == [200, 403], reply
    assert reply.count(b"\r\n\r\nallowed") == 1, reply  # the body of the one forwarded
    assert [(d["decision"], d["port"]) for d in decisions] == [
        ("allow", allowed.port),
        ("refuse", other.port),
    ]
    assert allowed.paths == ["/one"]
    assert other.paths == []


def test_row14_keep_alive_requests_are_each_forwarded_with_their_own_host() -> None:
    with upstream("allowed") as allowed, egress_proxy(f"127.0.0.1:{allowed.port}") as proxy:
        first = f"GET http://127.0.0.1:{allowed.port}/one HTTP/1.1\r\nHost: a\r\n\r\n"
        second = (
            f"GET http://127.0.0.1:{allowed.port}/two HTTP/1.1\r\nHost: evil.test\r\n"
            "Connection: close\r\n\r\n"
        )
        pipelined = proxy.exchange((first + second).encode())
        sequential = proxy.exchange(first.encode(), then=second.encode())
        decisions = proxy.decisions(4)
    assert statuses(pipelined) == [200, 200], pipelined
    assert statuses(sequential) == [200, 200], sequential
    assert [d["decision"] for d in decisions] == ["allow"] * 4
    assert [(s.path, s.host) for s in allowed.seen] == [
        ("/one", f"127.0.0.1:{allowed.port}"),
        ("/two", f"127.0.0.1:{allowed.port}"),
    ] * 2


# --------------------------------------------------------------------------- issue 38


def _private_host_address() -> str | None:
    """A non-loopback address of this host that the address guard refuses (Docker's bridge
    gateway 172.17.0.1 when there is one: the issue's case), or None. Chosen by the standard
    library's judgement, not the proxy's (so the tests run against an old proxy too)."""
    found = [a for a in host_addresses() if not ipaddress.ip_address(a).is_global]
    found.sort(key=lambda a: a != "172.17.0.1")
    return next(iter(found), None)


PRIVATE = _private_host_address()
needs_private = pytest.mark.skipif(
    PRIVATE is None, reason="this host has no private non-loopback address to listen on"
)
REFUSED = b"refused by this sandbox's network policy"


@contextmanager
def hosts_file(*lines: str) -> Iterator[str]:
    """A hosts(5) file for the proxy's ``--hosts`` (its resolution path, with our answers)."""
    with tempfile.NamedTemporaryFile("w", suffix=".hosts") as file:
        file.write("".join(line + "\n" for line in lines))
        file.flush()
        yield file.name


def _listener_on_80() -> Listener | None:
    try:
        return Listener(str(PRIVATE), 80)
    except OSError:  # not root: the domain-rule case then shows the refusal (403, not 502)
        return None


@needs_private
@pytest.mark.parametrize("form", ["ipv4", "ipv4-mapped"])
def test_px4_names_under_domain_and_block_rules_never_reach_private_addresses(
    form: str,
) -> None:
    """A name under an allowed domain, or one a block list lets through, resolving to the host's
    bridge/private address (or its IPv4-mapped IPv6 form) is refused before any connection."""
    address = str(PRIVATE) if form == "ipv4" else f"::ffff:{PRIVATE}"
    with (
        http_server("private-service", str(PRIVATE)) as service,
        hosts_file(f"{address} rebind.example.test") as hosts,
    ):
        service_port = service.port
        rebind = f"CONNECT rebind.example.test:{service_port} HTTP/1.1\r\nHost: x\r\n\r\n"
        with egress_proxy(options=["--policy", "block:evil.test", "--hosts", hosts]) as proxy:
            blocked = proxy.exchange(rebind.encode())
            [line] = proxy.decisions(1)
        assert statuses(blocked) == [403] and REFUSED in blocked, blocked
        assert f"rebind.example.test resolves to {address} is a private" in str(line["reason"])
        assert "resolves" not in blocked.decode("latin-1")  # the guest learns nothing of it
    assert service.paths == []


@needs_private
def test_px4_domain_rule_on_port_80_is_refused_for_a_private_address() -> None:
    """The issue's reproduction: ``allow:example.test``, ``rebind.example.test`` → the bridge
    gateway, GET through the proxy on port 80."""
    listener = _listener_on_80()
    try:
        with (
            hosts_file(f"{PRIVATE} rebind.example.test example.test") as hosts,
            egress_proxy(options=["--policy", "allow:example.test", "--hosts", hosts]) as proxy,
        ):
            replies = [
                proxy.exchange(f"GET http://{name}/ HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
                for name in ("rebind.example.test", "example.test")  # the apex is a name too
            ]
            lines = proxy.decisions(2)
        if listener is not None:
            assert listener.accepted == 0
        assert all(statuses(reply) == [403] and REFUSED in reply for reply in replies), replies
        assert [line["decision"] for line in lines] == ["refuse", "refuse"]
        assert all("is a private" in str(line["reason"]) for line in lines), lines
    finally:
        if listener is not None:
            listener.close()


@needs_private
def test_px4_explicit_ip_and_host_port_rules_stay_reachable() -> None:
    """An IP literal or ``HOST:PORT`` entry names its destination exactly: not guarded."""
    with (
        http_server("service", str(PRIVATE)) as service,
        hosts_file(f"{PRIVATE} intranet.test") as hosts,
        egress_proxy(
            options=[
                "--policy",
                f"allow:{PRIVATE}:{service.port},intranet.test:{service.port}",
                "--hosts",
                hosts,
            ]
        ) as proxy,
    ):
        for authority in (f"{PRIVATE}:{service.port}", f"intranet.test:{service.port}"):
            reply = proxy.exchange(
                f"GET http://{authority}/ok HTTP/1.1\r\nHost: x\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            assert statuses(reply) == [200], reply
    assert service.paths == ["/ok", "/ok"]


@needs_private
def test_px4_ask_approvals_never_reach_private_addresses() -> None:
    """A person approves a name; it resolves to the host's private address: refused. A private
    IP literal is refused without a question (an approval could not be used)."""
    with (
        http_server("private-service", str(PRIVATE)) as service,
        hosts_file(f"{PRIVATE} innocent.example.test") as hosts,
        tempfile.TemporaryDirectory() as folder,
    ):
        control = f"{folder}/control.sock"
        options = ["--policy", "ask:", "--ask-timeout", "5", "--hosts", hosts]
        options += ["--control", control]
        with egress_proxy(options=options) as proxy, ThreadPoolExecutor(1) as pool:
            literal = proxy.exchange(
                f"CONNECT {PRIVATE}:{service.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            name = f"innocent.example.test:{service.port}"
            head = f"CONNECT {name} HTTP/1.1\r\nHost: x\r\n\r\n"
            held = pool.submit(proxy.exchange, head.encode())
            with _controller(control) as questions:
                question = questions.next(WAIT_S)
                assert question is not None and question.host == "innocent.example.test"
                questions.answer(question.id, "approve", by="alice")
                approved = held.result(WAIT_S)
            lines = proxy.decisions(2)
            assert len(proxy.events("question", 1)) == 1  # the literal was never asked about
    assert statuses(literal) == [403] and REFUSED in literal, literal
    assert statuses(approved) == [403] and REFUSED in approved, approved
    assert str(lines[0]["reason"]).endswith("address; never asked"), lines[0]
    assert str(lines[0]["reason"]).startswith(f"{PRIVATE} is a"), lines[0]
    assert str(lines[1]["reason"]).startswith("approved by alice; but innocent.example.test")
    assert service.paths == []


@needs_private
def test_px4_the_address_connected_to_is_the_one_checked() -> None:
    """DNS rebinding: the name is resolved once; the connection goes to exactly the checked
    socket address, even if a second lookup would now answer loopback."""
    calls: list[str] = []
    with Listener(str(PRIVATE)) as checked, Listener("127.0.0.1") as rebound:

        async def rebinding(host: str, port: int) -> list[guard.SocketAddress]:
            calls.append(host)
            target = checked if len(calls) == 1 else rebound
            return [(socket.AF_INET, (target.address, target.port))]

        async def scenario() -> None:
            decision = origins.Decision("allow", "rebind.example.test", 0, "test", guard=True)
            permit = [origins.parse_permit(f"{PRIVATE}/32")]
            _reader, writer = await guard.open_upstream(decision, permit, rebinding)
            writer.close()

        asyncio.run(scenario())
        assert checked.wait_accepted(1, WAIT_S)
    assert calls == ["rebind.example.test"]
    assert rebound.accepted == 0


@pytest.mark.parametrize("extra", [0, 1, 15_000])
def test_a7c_request_heads_are_limited_to_exactly_64_kib(extra: int) -> None:
    """Every byte of the head counts, across reads: exactly MAX_HEAD_BYTES passes, one more is
    refused with 431 (before: up to ~80 KB passed, the limit was checked between reads only)."""
    with upstream("up") as up, egress_proxy(f"127.0.0.1:{up.port}") as running:
        start = f"GET http://127.0.0.1:{up.port}/big HTTP/1.1\r\nHost: a\r\nX: ".encode()
        end = b"\r\nConnection: close\r\n\r\n"
        size = px.MAX_HEAD_BYTES + extra
        head = start + b"y" * (size - len(start) - len(end)) + end
        assert len(head) == size
        with socket.create_connection(("127.0.0.1", running.port), timeout=WAIT_S) as sock:
            sock.sendall(head[:40_000])  # two writes: the limit holds across reads
            time.sleep(0.05)
            sock.sendall(head[40_000:])
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        [line] = running.decisions(1)
    if extra == 0:
        assert statuses(reply) == [200], reply[:300]
        assert up.paths == ["/big"]
    else:
        assert statuses(reply) == [431], reply[:300]
        assert line["decision"] == "refuse" and "larger than 65536 bytes" in str(line["reason"])
        assert up.paths == []


def test_aq3_the_guest_cannot_tell_a_rule_a_person_or_a_timeout_apart(
    pool: ThreadPoolExecutor,
) -> None:
    """One origin refused by an allow list, by a person (deny) and by the ask timeout: the guest
    gets the same status and the same bytes; the log says who."""
    port = free_port()
    request = f"GET http://other.test:{port}/x HTTP/1.1\r\nHost: other.test\r\n\r\n".encode()
    tunnel = f"CONNECT other.test:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    replies: dict[str, tuple[bytes, bytes]] = {}
    reasons: dict[str, str] = {}
    with egress_proxy(options=["--policy", "allow:example.test"]) as running:
        replies["rule"] = (running.exchange(request), running.exchange(tunnel))
        reasons["rule"] = str(running.decisions(1)[0]["reason"])
    with tempfile.TemporaryDirectory() as folder:
        control = f"{folder}/control.sock"
        options = ["--policy", "ask:", "--ask-timeout", "1", "--control", control]
        with egress_proxy(options=options) as running, _controller(control) as questions:
            held = pool.submit(running.exchange, request)
            question = questions.next(WAIT_S)
            assert question is not None
            questions.answer(question.id, "deny", by="alice")
            replies["person"] = (held.result(WAIT_S), running.exchange(tunnel))
            reasons["person"] = str(running.decisions(1)[0]["reason"])
        with egress_proxy(options=options) as running:  # nobody answers
            timed_out = pool.submit(running.exchange, request)
            replies["timeout"] = (timed_out.result(WAIT_S), b"")
            reasons["timeout"] = str(running.decisions(1)[0]["reason"])
    assert reasons == {
        "rule": "not in the allow list",
        "person": "denied by alice",
        "timeout": "no answer within 1 s",
    }
    pages = {who: page for who, (page, _) in replies.items()}
    assert statuses(pages["rule"]) == [403] and REFUSED in pages["rule"], pages["rule"]
    assert pages["person"] == pages["rule"] and pages["timeout"] == pages["rule"], pages
    assert replies["person"][1] == replies["rule"][1] and statuses(replies["rule"][1]) == [403]
    for page, _ in replies.values():
        assert b"alice" not in page and b"answer" not in page and b"allow list" not in page


@contextmanager
def _controller(control: str) -> Iterator[OriginQuestions]:
    """The host side of an ask-mode proxy's control socket (as ``cubicle ask`` uses it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(control)
    with OriginQuestions(AgentStream(sock, "test proxy"), "attack") as questions:
        yield questions


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor
