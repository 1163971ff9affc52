"""The egress proxy's origin check: exact host and port, IDNA, IP literals; fuzzed with hypothesis.

The proxy (orchestrator/egress.py) runs in its own container with the standard library only, so
it carries its own copy of the check; these tests pin it to NetworkPolicy.allows.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import egress
from orchestrator.network import NetworkPolicy

POLICY = NetworkPolicy.parse(
    "allow:example.com,api.example.org:8443,10.1.2.3:80,[2001:db8::1]:443,bücher.de"
)
ORIGINS = [egress.parse_allowed(str(origin)) for origin in POLICY.allow]

BASES = [
    "example.com",
    "api.example.org",
    "10.1.2.3",
    "2001:db8::1",
    "bücher.de",
    "xn--bcher-kva.de",
]
MUTATIONS = [
    lambda h: h,
    str.upper,
    lambda h: h + ".",
    lambda h: h + ".evil.test",
    lambda h: "evil.test." + h,
    lambda h: "sub." + h,
    lambda h: h.replace("e", "é", 1),
    lambda h: h.replace(".", "", 1),
    lambda h: f"[{h}]",
    lambda h: h + "/x",
    lambda h: "user@" + h,
    lambda h: h + "\x00",
    lambda h: " " + h,
    lambda h: h[:-1],
]

hosts = st.one_of(
    st.builds(
        lambda base, mutate: mutate(base), st.sampled_from(BASES), st.sampled_from(MUTATIONS)
    ),
    st.text(max_size=40),
    st.ip_addresses().map(str),
)
ports = st.one_of(st.sampled_from([80, 443, 8443, 8080, 0, 65535, 65536]), st.integers(-5, 70000))


@settings(max_examples=3000, deadline=None)
@given(host=hosts, port=ports)
def test_proxy_check_agrees_with_the_policy(host: str, port: int) -> None:
    decided = egress.decide(ORIGINS, host, port).allowed
    assert decided == (POLICY.allows(host, port) and 1 <= port <= 65535)


@settings(max_examples=1000, deadline=None)
@given(host=hosts, port=ports)
def test_allowed_means_exactly_an_origin(host: str, port: int) -> None:
    decision = egress.decide(ORIGINS, host, port)
    if decision.allowed:
        assert any(
            decision.host == o.host and (port == o.port if o.port else port in (80, 443))
            for o in ORIGINS
        )


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("example.com", 443, True),
        ("EXAMPLE.com.", 80, True),
        ("example.com", 8080, False),
        ("example.com.evil.test", 443, False),
        ("evil.test/example.com", 80, False),
        ("sub.example.com", 443, False),
        ("api.example.org", 8443, True),
        ("api.example.org", 443, False),
        ("10.1.2.3", 80, True),
        ("10.1.2.3", 443, False),
        ("010.001.002.003", 80, False),
        ("[2001:db8::1]", 443, True),
        ("2001:0db8:0:0:0:0:0:1", 443, True),
        ("bücher.de", 443, True),
        ("xn--bcher-kva.de", 443, True),
        ("bucher.de", 443, False),
    ],
)
def test_examples(host: str, port: int, allowed: bool) -> None:
    assert egress.decide(ORIGINS, host, port).allowed is allowed


def test_parse_head_connect_and_absolute_uri() -> None:
    connect = egress.parse_head(
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    )
    assert (connect.method, connect.host, connect.port, connect.forward_head) == (
        "CONNECT",
        "example.com",
        443,
        None,
    )
    get = egress.parse_head(
        b"GET http://example.com:8080/a?b=1 HTTP/1.1\r\nHost: example.com\r\n"
        b"Proxy-Connection: keep-alive\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n"
    )
    assert (get.host, get.port) == ("example.com", 8080)
    assert get.forward_head == (
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",  # origin-form: not a proxy request
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",  # https must be tunnelled
        b"GET ftp://example.com/ HTTP/1.1\r\n\r\n",
        b"GET http://user@evil.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT example.com HTTP/1.1\r\n\r\n",
        b"GET http://example.com:99999/ HTTP/1.1\r\n\r\n",
        b"NONSENSE\r\n\r\n",
    ],
)
def test_parse_head_refuses(head: bytes) -> None:
    with pytest.raises(egress.BadRequest):
        egress.parse_head(head)
