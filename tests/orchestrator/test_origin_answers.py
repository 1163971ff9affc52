"""Who answers ask-mode questions without a server (``cubicle run``, ``cubicle ask``): a policy
file's ``[[origin]]`` rules, the terminal (default deny), or no one (deny) — against the real
proxy run standalone (no Docker: tests/orchestrator/test_docker_ask.py has the sandbox runs)."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import pytest

from cubicle.drivers.errors import PolicyFileError
from cubicle.drivers.policy_file import parse_policy
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.origin_answers import OriginAnswerer, TerminalQuestions, with_ask_timeout
from cubicle.orchestrator.origin_questions import OriginQuestion
from tests.orchestrator.support import http_server
from tests.orchestrator.test_egress_ask import HOST, WAIT_S, ask_proxy, controller, get
from tests.support.egress import statuses

pytestmark = pytest.mark.skipif(HOST is None, reason="the host has no non-loopback IPv4 address")

QUESTION = OriginQuestion(
    id="q1",
    sandbox_id="dk-x",
    origin="https://example.test",
    host="example.test",
    port=443,
    method="CONNECT",
    target="example.test:443",
    client="10.0.0.2",
    reason="not in the allow list",
    asked_at=0.0,
    deadline=1e12,
)


@pytest.mark.parametrize(
    ("typed", "answer", "why"),
    [
        ("y\n", "approve", "approved at the prompt"),
        ("YES\n", "approve", "approved at the prompt"),
        ("\n", "deny", "empty answer; default is deny"),
        ("n\n", "deny", "denied at the prompt"),
        ("sure\n", "deny", "denied at the prompt"),
        ("", "deny", "no answer (end of input); default is deny"),
    ],
)
def test_the_terminal_defaults_to_deny(typed: str, answer: str, why: str) -> None:
    shown = io.StringIO()
    assert TerminalQuestions(io.StringIO(typed), shown).ask(QUESTION) == (answer, why)
    assert "The guest wants to reach https://example.test (CONNECT example.test:443)" in (
        shown.getvalue()
    )
    assert shown.getvalue().endswith("= deny) [y/N] ")


POLICY = """\
version = 1
origin_access = "ask"

[[origin]]
decision = "deny"
origins = ["blocked.example.test"]

[[origin]]
decision = "allow"
origins = ["example.test", "10.9.8.7:8080"]
note = "docs"
"""


def test_policy_file_origin_rules_use_the_proxy_grammar() -> None:
    policy = parse_policy(POLICY, "p.toml")
    assert policy.decide_origin("www.example.test", 443) == (
        "allow",
        "policy p.toml origin 2 (line 8): docs",
    )
    assert policy.decide_origin("a.blocked.example.test", 443) == (
        "deny",
        "policy p.toml origin 1 (line 4)",
    )
    assert policy.decide_origin("example.test", 8443)[0] == "ask"  # domains: 80/443 only
    assert policy.decide_origin("10.9.8.7", 8080)[0] == "allow"
    assert policy.decide_origin("other.test", 80) == ("ask", "policy p.toml origin_access default")
    assert parse_policy('origin_access = "deny"').decide_origin("x.test", 80)[0] == "deny"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[[origin]]\norigins = ["a.test"]\n', 1, "origin 1: missing 'decision'"),
        ('[[origin]]\ndecision = "allow"\n', 1, "origin 1: missing 'origins'"),
        ('[[origin]]\ndecision = "allow"\norigins = ["http://a.test"]\n', 3, "without scheme"),
        ('[[origin]]\ndecision = "allow"\norigins = ["a.test,b.test"]\n', 3, "one origin per"),
        ('[[origin]]\ndecision = "allow"\norigins = []\n', 3, "non-empty list"),
        ('[[origin]]\ndecision = "maybe"\norigins = ["a.test"]\n', 2, "decision must be one"),
        ('[[origin]]\ndecision = "allow"\norigins = ["a.test"]\nport = 1\n', 4, "unknown key"),
        ('origin_access = "perhaps"\n', 1, "origin_access must be one of"),
    ],
)
def test_bad_origin_rules_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(PolicyFileError, match=message) as error:
        parse_policy(text, "p.toml")
    assert error.value.line == line


def test_ask_timeout_applies_to_ask_policies_only() -> None:
    ask = NetworkPolicy.parse("ask:example.test")
    assert ask.ask_timeout == 120
    assert with_ask_timeout(ask, 5).ask_timeout == 5
    assert with_ask_timeout(ask, None) is ask
    with pytest.raises(ConfigError, match="applies to --network ask"):
        with_ask_timeout(NetworkPolicy.parse("allow:example.test"), 5)
    for bad in (0, -1, 86401, float("nan")):
        with pytest.raises(ConfigError, match="ask timeout must be"):
            with_ask_timeout(ask, bad)


def test_the_answerer_applies_policy_then_terminal_then_deny() -> None:
    """Three origins: one the file allows, one it leaves to the terminal (answered y), and,
    with a second answerer that has no terminal, one denied for want of anyone to ask."""
    with (
        http_server("a") as first,
        http_server("b") as second,
        ask_proxy() as (proxy, control),
        ThreadPoolExecutor(2) as pool,
    ):
        policy = parse_policy(
            f'[[origin]]\ndecision = "allow"\norigins = ["{HOST}:{first.port}"]\n', "p.toml"
        )
        questions = controller(control)
        answerer = OriginAnswerer(
            questions,
            policy=policy,
            terminal=TerminalQuestions(io.StringIO("y\n"), io.StringIO()),
        )
        by_policy = proxy.exchange(get("/policy", first))
        by_terminal = proxy.exchange(get("/terminal", second))
        assert questions.wait_decided("q2", WAIT_S) is not None  # seen on this side too
        answerer.close()
        decisions = questions.decisions()
        # no terminal: deny (a new origin, since approvals are remembered)
        with http_server("c") as third:
            mute = OriginAnswerer(controller(control), policy=None, terminal=None)
            refused = pool.submit(proxy.exchange, get("/nobody", third))
            assert statuses(refused.result(WAIT_S)) == [403]
            assert mute.questions.wait_decided("q3", WAIT_S) is not None
            mute_decisions = mute.questions.decisions()
            mute.close()
            assert third.paths == []
    assert statuses(by_policy) == [200] and statuses(by_terminal) == [200]
    assert [(d.answer, d.by) for d in decisions] == [
        ("approve", "policy p.toml origin 1 (line 1)"),
        (
            "approve",
            "policy p.toml origin_access default -> cubicle run terminal (approved at the prompt)",
        ),
    ]
    assert [(d.answer, d.by) for d in mute_decisions] == [
        ("deny", "cubicle run (no terminal to ask; default deny)")
    ]
