"""Attacks on the egress proxy (issue 15, rows 12-14), each against the real proxy run standalone
on 127.0.0.1 with local upstream servers: every request on a connection is judged and logged,
the Host header cannot smuggle another origin, a malformed port is refused (not a crash)."""

from __future__ import annotations

import pytest

from tests.support.egress import egress_proxy, statuses, upstream

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
