"""The origin check: exact host and port, IDNA, IP literals; fuzzed with hypothesis.

There is one origin type, one origin parser and one decision, in the standalone proxy
(orchestrator/egress.py); policy parsing (orchestrator/network.py) uses them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import egress, network
from orchestrator.errors import ConfigError
from orchestrator.network import NetworkPolicy

POLICY = NetworkPolicy.parse(
    "allow:example.com,api.example.org:8443,10.1.2.3:80,[2001:db8::1]:443,bücher.de"
)
ORIGINS = [egress.parse_origin(str(origin)) for origin in POLICY.allow]

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


def test_one_definition_of_origins_and_decisions() -> None:
    """network.py defines no origin type, parser or check of its own: it uses egress.py's."""
    assert network.Origin is egress.Origin
    assert list(POLICY.allow) == ORIGINS
    assert all(type(origin) is egress.Origin for origin in POLICY.allow)
    for text in ("example.com:0", "a:\xb2", "[::1", "http://x", "", "bad_host!"):
        with pytest.raises(egress.InvalidOrigin) as proxy_error:
            egress.parse_origin(text)
        with pytest.raises(ConfigError) as policy_error:
            network.parse_origin(text)
        assert str(policy_error.value) == str(proxy_error.value)
    repo = Path(egress.__file__).resolve().parents[1]
    own = {"Origin", "AllowedOrigin", "parse_origin", "parse_allowed", "decide", "split_authority"}
    for path in [
        p for pkg in ("orchestrator", "drivers", "guest") for p in (repo / pkg).rglob("*.py")
    ]:
        if path.name == "egress.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets = (
                node.targets if isinstance(node, ast.Assign)
                else [node.target] if isinstance(node, ast.AnnAssign) else []
            )  # fmt: skip
            assert "EGRESS_PORT" not in {getattr(t, "id", "") for t in targets}, path
            if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in own:
                assert path.name == "network.py" and node.name == "parse_origin", (path, node.name)
                # the policy parser only maps the proxy's error to cubicle's ConfigError
                called = {
                    n.func.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                }
                assert called == {"parse_origin"}, called


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


def test_parse_target_connect_and_absolute_uri() -> None:
    assert egress.parse_target("CONNECT", "example.com:443") == ("example.com", 443, None)
    assert egress.parse_target("CONNECT", "[2001:db8::1]:8443") == ("2001:db8::1", 8443, None)
    assert egress.parse_target("GET", "http://example.com:8080/a?b=1") == (
        "example.com",
        8080,
        "/a?b=1",
    )
    assert egress.parse_target("POST", "HTTP://Example.com") == ("Example.com", 80, "/")


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("GET", "/"),  # origin-form: not a proxy request
        ("GET", "https://example.com/"),  # https must be tunnelled
        ("GET", "ftp://example.com/"),
        ("GET", "http://user@evil.test/"),
        ("GET", "http://example.com:99999/"),
        ("GET", "http://example.com:0/"),
        ("GET", "http://example.com:\xb2/"),
        ("GET", "http://[::1/"),
        ("CONNECT", "example.com"),
        ("CONNECT", "a:\xb2"),
        ("CONNECT", "a:\u0663"),  # Arabic-Indic three
        ("CONNECT", "a:\uff18\uff10"),  # fullwidth 80
        ("CONNECT", "a:+80"),
        ("CONNECT", "a: 80"),
    ],
)
def test_parse_target_refuses(method: str, target: str) -> None:
    with pytest.raises(egress.BadRequest):
        egress.parse_target(method, target)
