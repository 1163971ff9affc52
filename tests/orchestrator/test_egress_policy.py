"""The origin check: domains (with subdomains) on 80/443, exact host:port, block lists, ask,
IDNA, IP literals; fuzzed with hypothesis.

There is one origin type, one origin parser and one decision, in the standalone proxy
(cubicle/egress/origins.py); policy parsing (cubicle/orchestrator/network.py) uses them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cubicle.egress import origins as egress
from cubicle.egress import proxy, targets
from cubicle.orchestrator import network
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import NetworkPolicy

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
    """network.py defines no origin type, parser or check of its own: it uses the grammar's
    (cubicle/egress/origins.py)."""
    assert network.Origin is egress.Origin
    assert list(POLICY.allow) == ORIGINS
    assert all(type(origin) is egress.Origin for origin in POLICY.allow)
    for text in ("example.com:0", "a:\xb2", "[::1", "http://x", "", "bad_host!"):
        with pytest.raises(egress.InvalidOrigin) as proxy_error:
            egress.parse_origin(text)
        with pytest.raises(ConfigError) as policy_error:
            network.parse_origin(text)
        assert str(policy_error.value) == str(proxy_error.value)
    repo = Path(egress.__file__).resolve().parents[2]
    own = {
        "Origin",
        "AllowedOrigin",
        "parse_origin",
        "parse_allowed",
        "decide",
        "split_authority",
        "covers_host",
        "forbidden_address",
    }
    sources = [p for pkg in ("cubicle", "cubicle_guest") for p in (repo / pkg).rglob("*.py")]
    assert repo / "cubicle" / "orchestrator" / "network.py" in sources  # the walk sees the code
    for path in sources:
        if path.parent.name == "egress":  # the grammar (origins.py) and the port (proxy.py)
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
def test_allowed_means_an_entry_admits_it(host: str, port: int) -> None:
    """Allowed only when an entry admits it: a domain entry (name, no port) its host or a
    whole-label subdomain on 80/443; an IP without port on 80/443; HOST:PORT exactly."""
    decision = egress.decide(ORIGINS, host, port)
    if decision.allowed:
        assert any(
            (
                (decision.host == o.host or decision.host.endswith("." + o.host))
                if o.port is None and not egress.is_ip(o.host)
                else decision.host == o.host
            )
            and (port == o.port if o.port else port in (80, 443))
            for o in ORIGINS
        ), decision
        # an admission by a domain rule (the domain or a subdomain) is guarded (public
        # addresses only); one by an IP literal or HOST:PORT entry (named exactly) is not
        exact = any(not o.is_domain and o.allows(decision.host, port) for o in ORIGINS)
        assert decision.guard is not exact


@settings(max_examples=500, deadline=None)
@given(host=hosts, port=ports)
def test_block_list_refuses_exactly_the_blocked_domains(host: str, port: int) -> None:
    blocked = egress.parse_policy("block:example.com,10.1.2.3")
    decision = egress.decide(blocked, host, port)
    try:
        name = egress.normalize_host(host)
    except egress.InvalidHost:
        assert not decision.allowed
        return
    inside = name == "10.1.2.3" or name == "example.com" or name.endswith(".example.com")
    assert decision.allowed is (not inside and 1 <= port <= 65535), decision
    assert decision.guard is decision.allowed


@pytest.mark.parametrize(
    ("host", "port", "allowed"),
    [
        ("example.com", 443, True),
        ("EXAMPLE.com.", 80, True),
        ("example.com", 8080, False),
        ("example.com.evil.test", 443, False),
        ("evil.test/example.com", 80, False),
        ("sub.example.com", 443, True),
        ("a.b.sub.example.com", 80, True),
        ("sub.example.com", 8443, False),
        ("badexample.com", 443, False),
        ("example.com.", 443, True),
        ("api.example.org", 8443, True),
        ("api.example.org", 443, False),
        ("v2.api.example.org", 8443, False),
        ("10.1.2.3", 80, True),
        ("10.1.2.3", 443, False),
        ("010.001.002.003", 80, False),
        ("[2001:db8::1]", 443, True),
        ("2001:0db8:0:0:0:0:0:1", 443, True),
        ("bücher.de", 443, True),
        ("xn--bcher-kva.de", 443, True),
        ("bucher.de", 443, False),
        ("www.bücher.de", 443, True),
    ],
)
def test_examples(host: str, port: int, allowed: bool) -> None:
    assert egress.decide(ORIGINS, host, port).allowed is allowed


def test_parse_target_connect_and_absolute_uri() -> None:
    assert targets.parse_target("CONNECT", "example.com:443") == ("example.com", 443, None)
    assert targets.parse_target("CONNECT", "[2001:db8::1]:8443") == ("2001:db8::1", 8443, None)
    assert targets.parse_target("GET", "http://example.com:8080/a?b=1") == (
        "example.com",
        8080,
        "/a?b=1",
    )
    assert targets.parse_target("POST", "HTTP://Example.com") == ("Example.com", 80, "/")


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
    with pytest.raises(targets.BadRequest):
        targets.parse_target(method, target)


def test_one_entry_per_port_of_a_host_each_count() -> None:
    """Two exact entries for one host: each port is allowed (not only the first listed)."""
    policy = egress.parse_policy("allow:a.test:443,a.test:8080")
    assert egress.decide(policy, "a.test", 8080).allowed
    assert egress.decide(policy, "a.test", 443).allowed
    assert egress.decide(policy, "a.test", 80).reason == "port 80 not allowed for a.test"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("block:example.com:443", "names a port"),
        ("allow:a.test,block:b.test", "cannot be combined"),
        ("block:a.test,allow:b.test", "cannot be combined"),
        ("ask:a.test,allow:b.test", "cannot be combined"),
        ("allow:", "empty entry"),
        ("allow:a.test,,b.test", "empty entry"),
        ("block:", "empty entry"),
        ("deny:a.test", "unknown (proxy|network) policy"),
        ("allow:http://a.test", "without scheme"),
        ("block:*.a.test", "invalid host name"),
    ],
)
def test_bad_policies_are_named(text: str, error: str) -> None:
    with pytest.raises(egress.InvalidOrigin, match=error):
        egress.parse_policy(text)
    with pytest.raises(ConfigError, match=error):
        NetworkPolicy.parse(text)


@pytest.mark.parametrize(
    "text",
    [
        "allow:example.com,api.example.org:8443,10.1.2.3,[2001:db8::1]:443",
        "block:evil.test,10.9.9.9",
        "ask:",
        "ask:example.com,127.0.0.1:8080",
    ],
)
def test_policy_text_round_trips(text: str) -> None:
    policy = NetworkPolicy.parse(text)
    assert policy.proxied
    assert NetworkPolicy.parse(str(policy)) == policy
    assert egress.parse_policy(str(policy.proxy_policy)) == policy.proxy_policy


def test_restricted_maps_the_product_fields() -> None:
    allowed = NetworkPolicy.restricted(allowed_domains=["example.com", "api.x.org:8443"])
    assert str(allowed) == "allow:api.x.org:8443,example.com"
    assert allowed.allows("www.example.com", 443) and not allowed.allows("x.org", 443)
    blocked = NetworkPolicy.restricted(blocked_domains=["evil.test"])
    assert str(blocked) == "block:evil.test"
    assert blocked.allows("good.test", 22) and not blocked.allows("a.evil.test", 443)
    asked = NetworkPolicy.restricted(allowed_domains=["example.com"], ask=True, ask_timeout=5)
    assert (str(asked), asked.ask_timeout) == ("ask:example.com", 5)
    assert not asked.allows("other.test", 443)  # would be asked, not allowed outright
    assert egress.decide(asked.proxy_policy, "other.test", 443).verdict == "ask"
    for kwargs, error in [
        ({"allowed_domains": ["a.test"], "blocked_domains": ["b.test"]}, "cannot be combined"),
        ({"blocked_domains": ["b.test"], "ask": True}, "ask mode takes an allow list"),
        ({}, "needs allowed_domains"),
        ({"allowed_domains": ["a.test,b.test"]}, "one domain per entry"),
        ({"ask": True, "ask_timeout": 0}, "ask timeout"),
    ]:
        with pytest.raises(ConfigError, match=error):
            NetworkPolicy.restricted(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("172.17.0.1", "private (RFC 1918)"),
        ("10.231.0.1", "private (RFC 1918)"),
        ("192.168.1.1", "private (RFC 1918)"),
        ("100.64.0.1", "CGNAT"),
        ("fd00::2", "unique-local"),
        ("fec0::1", "site-local"),
        ("240.0.0.1", "reserved"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.2.2", "documentation"),
        ("::ffff:172.17.0.1", "IPv4-mapped form of 172.17.0.1"),
        ("64:ff9b::a00:5", "NAT64 form of 10.0.0.5"),
        ("2002:ac11:1::1", "6to4 form of 172.17.0.1"),
        ("2002:7f00:1::", "6to4 form of 127.0.0.1"),
        ("::7f00:1", "reserved"),  # IPv4-compatible
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
        ("64:ff9b::5db8:d822", None),  # NAT64 of a public address
        ("2002:5db8:d822::1", None),  # 6to4 of a public address
    ],
)
def test_guarded_destinations_reach_public_addresses_only(address: str, why: str | None) -> None:
    found = egress.forbidden_address(address)
    assert (found is None) if why is None else (found is not None and why in found), found


def test_permitted_internal_networks() -> None:
    """``--allow-internal NET`` lets guarded destinations reach that internal network, in any
    of its IPv6 forms too; loopback, link-local, unspecified and multicast never."""
    permit = [egress.parse_permit("10.1.0.0/16"), egress.parse_permit("fd00::/64")]
    assert egress.forbidden_address("10.1.2.3", permit) is None
    assert egress.forbidden_address("::ffff:10.1.2.3", permit) is None
    assert egress.forbidden_address("fd00::2", permit) is None
    assert egress.forbidden_address("10.2.0.1", permit) is not None
    assert egress.forbidden_address("127.0.0.1", permit) is not None
    for text, error in [
        ("127.0.0.1", "overlaps 127.0.0.0/8"),
        ("0.0.0.0/0", "overlaps 0.0.0.0/8"),
        ("169.254.0.0/24", "link-local"),
        ("::/0", "overlaps"),
        ("10.0.0.1/8", "host bits set"),
        ("example.com", "does not appear to be"),
    ]:
        with pytest.raises(egress.InvalidOrigin, match=error):
            egress.parse_permit(text)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--allow-internal", "127.0.0.0/8"], "overlaps 127.0.0.0/8"),
        (["--allow-internal", "10.0.0.1/8"], "host bits set"),
        (["--hosts", "/nonexistent/hosts"], "--hosts /nonexistent/hosts: No such file"),
    ],
)
def test_bad_proxy_options_are_named(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        proxy.main(["--listen", "127.0.0.1:1", "--allow", "a.test", *argv])
    assert exit_.value.code == 2
    assert error in capsys.readouterr().err


def test_a_bad_hosts_file_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("# test names\n192.0.2.7 a.test\nnot-an-address b.test\n")
    with pytest.raises(SystemExit):
        proxy.main(["--listen", "127.0.0.1:1", "--allow", "a.test", "--hosts", str(hosts)])
    assert f"{hosts}:3: give 'ADDRESS NAME...'" in capsys.readouterr().err
