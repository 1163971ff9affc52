"""The session's ``environment.network`` mapped onto a sandbox network policy, with and without
the server's ask mode (``cubicle serve --ask-origins``); every refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from cubicle.orchestrator.serve.environment import parse_environment
from cubicle.orchestrator.serve.errors import ApiError

NO_ASK = None
ASK = 30.0


def policy_of(network: dict[str, Any], ask_timeout: float | None) -> tuple[str, float]:
    plan = parse_environment({"type": "openai_hosted", "network": network}, ask_timeout=ask_timeout)
    return str(plan.network), plan.network.ask_timeout


@pytest.mark.parametrize(
    ("network", "ask_timeout", "policy"),
    [
        ({"access": "disabled"}, NO_ASK, "none"),
        ({"access": "disabled"}, ASK, "none"),
        ({"access": "enabled"}, NO_ASK, "open"),
        # ask mode: every new origin needs a person's approval, "enabled" included
        ({"access": "enabled"}, ASK, "ask:"),
        ({"access": "restricted", "allowed_domains": ["b.test", "a.test:8443"]}, NO_ASK,
         "allow:a.test:8443,b.test"),
        ({"access": "restricted", "blocked_domains": ["evil.test"]}, NO_ASK, "block:evil.test"),
        ({"access": "restricted", "allowed_domains": ["a.test"], "blocked_domains": []}, NO_ASK,
         "allow:a.test"),
        ({"access": "restricted", "allowed_domains": ["a.test"]}, ASK, "ask:a.test"),
        ({"access": "restricted", "allowed_domains": []}, ASK, "ask:"),
        ({"access": "restricted", "blocked_domains": None}, ASK, "ask:"),
    ],
)  # fmt: skip
def test_network_maps_to_the_policy(
    network: dict[str, Any], ask_timeout: float | None, policy: str
) -> None:
    text, timeout = policy_of(network, ask_timeout)
    assert text == policy
    if policy.startswith("ask:"):
        assert timeout == ASK


@pytest.mark.parametrize(
    ("network", "ask_timeout", "param", "words"),
    [
        ({"access": "restricted"}, NO_ASK, "allowed_domains", "at least one"),
        ({"access": "restricted", "allowed_domains": ["a.test"], "blocked_domains": ["b.test"]},
         NO_ASK, "blocked_domains", "cannot be combined"),
        ({"access": "restricted", "allowed_domains": ["a.test"], "blocked_domains": ["b.test"]},
         ASK, "blocked_domains", "cannot be combined"),
        ({"access": "restricted", "blocked_domains": ["b.test"]}, ASK, "blocked_domains",
         "--ask-origins"),
        ({"access": "restricted", "blocked_domains": ["b.test:443"]}, NO_ASK, "blocked_domains",
         "b.test:443"),
        ({"access": "restricted", "blocked_domains": "b.test"}, NO_ASK, "blocked_domains",
         "list of strings"),
        ({"access": "restricted", "allowed_domains": ["a b"]}, ASK, "allowed_domains", "a b"),
        ({"access": "enabled", "blocked_domains": ["b.test"]}, ASK, "blocked_domains",
         "needs access 'restricted'"),
        ({"access": "disabled", "allowed_domains": ["a.test"]}, NO_ASK, "allowed_domains",
         "needs access 'restricted'"),
        ({"access": "sometimes"}, ASK, "access", "sometimes"),
    ],
)  # fmt: skip
def test_network_refusals_name_the_field(
    network: dict[str, Any], ask_timeout: float | None, param: str, words: str
) -> None:
    with pytest.raises(ApiError) as caught:
        policy_of(network, ask_timeout)
    assert caught.value.status == 400
    assert caught.value.param == f"environment.network.{param}", caught.value.param
    assert words in caught.value.message, caught.value.message
