"""The drivers' ``settle`` option and how it meets the agent's features (no guest needed)."""

from __future__ import annotations

import pytest

from cubicle.drivers.errors import SettleOptionError
from cubicle.drivers.settle import check_settle, settle_for_agent
from cubicle_guest.protocol import FEATURES, IDLE_QUIET_MS, TYPING_QUIET_MS, SettleSpec


def test_the_default_types_with_the_short_quiet_period_and_never_longer_than_quiet() -> None:
    spec = check_settle(True)
    assert spec is not None and spec.typing_quiet_ms == TYPING_QUIET_MS < spec.quiet_ms
    assert spec.for_input(True).quiet_ms == TYPING_QUIET_MS
    assert spec.for_input(False).quiet_ms == spec.quiet_ms
    short = check_settle({"quiet_ms": 100})
    assert short is not None and short.for_input(True).quiet_ms == 100
    off = check_settle({"typing_quiet_ms": None})
    assert off is not None and off.for_input(True).quiet_ms == off.quiet_ms
    assert off.as_args()["typing_quiet_ms"] is None, "sent as null: left out, the agent's default"


def test_the_idle_quiet_period_applies_only_to_actions_into_a_normal_window() -> None:
    spec = SettleSpec()
    assert spec.quiet_when_idle() == IDLE_QUIET_MS < spec.quiet_ms
    assert spec.for_input(False, "normal").quiet_when_idle() == IDLE_QUIET_MS
    assert spec.for_input(True, "normal").quiet_when_idle() == IDLE_QUIET_MS
    for typing in (True, False):
        for window_type in ("dialog", None):
            other = spec.for_input(typing, window_type)
            assert other.idle_quiet_ms is None and other.quiet_when_idle() == spec.quiet_ms
    assert SettleSpec(quiet_ms=50).quiet_when_idle() == 50, "never longer than quiet_ms"
    off = check_settle({"idle_quiet_ms": None})
    assert off is not None and off.quiet_when_idle() == off.quiet_ms
    assert off.as_args()["idle_quiet_ms"] is None, "sent as null: left out, the agent's default"


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ({"typing_quiet_ms": -1}, "settle.typing_quiet_ms must be an integer >= 0"),
        ({"typing_quiet_ms": 1.5}, "settle.typing_quiet_ms must be an integer >= 0"),
        ({"typing_quiet_ms": 4000}, r"settle.typing_quiet_ms \(4000\) is over settle.cap_ms"),
        ({"idle_quiet_ms": -1}, "settle.idle_quiet_ms must be an integer >= 0"),
        ({"idle_quiet_ms": "short"}, "settle.idle_quiet_ms must be an integer >= 0"),
        ({"idle_quiet_ms": 4000}, r"settle.idle_quiet_ms \(4000\) is over settle.cap_ms"),
        ({"launch_cap_ms": 2999}, r"settle.launch_cap_ms must be from settle.cap_ms \(3000\)"),
        ({"launch_cap_ms": 180_001}, "settle.launch_cap_ms must be from .* to 180000, got"),
        ({"launch_cap_ms": "1m"}, "settle.launch_cap_ms must be an integer >= 0"),
    ],
)
def test_a_bad_typing_or_idle_quiet_period_or_launch_cap_is_named(
    option: dict[str, object], named: str
) -> None:
    with pytest.raises(SettleOptionError, match=named):
        check_settle(option)


def test_an_agent_without_the_feature_gets_the_spec_without_it() -> None:
    spec = SettleSpec()
    old = settle_for_agent(spec, {"features": ["receipts"], "protocol": 1}, "old")
    assert old.typing_quiet_ms is None and "typing_quiet_ms" not in old.as_args()
    assert old.idle_quiet_ms is None and "idle_quiet_ms" not in old.as_args()
    typing = settle_for_agent(spec, {"features": ["receipts", "typing_quiet"]}, "typing")
    assert typing.typing_quiet_ms == spec.typing_quiet_ms and typing.idle_quiet_ms is None
    assert "idle_quiet_ms" not in typing.as_args()
    idle = settle_for_agent(spec, {"features": ["receipts", "typing_quiet", "idle_quiet"]}, "i")
    assert idle.as_args()["idle_quiet_ms"] == IDLE_QUIET_MS
    new = settle_for_agent(spec, {"features": list(FEATURES)}, "new")
    assert new == spec and new.as_args()["idle_quiet_ms"] == IDLE_QUIET_MS
    launch = SettleSpec(launch_cap_ms=120_000)
    assert settle_for_agent(launch, {"features": list(FEATURES)}, "new") == launch
    assert settle_for_agent(launch, {"features": ["receipts"]}, "old").launch_cap_ms is None
    with pytest.raises(SettleOptionError, match="feature 'receipts' needed"):
        settle_for_agent(spec, {"features": []}, "older")


def test_a_launch_cap_is_sent_only_when_set_and_is_the_longest_wait() -> None:
    assert "launch_cap_ms" not in SettleSpec().as_args(), "unset: the agent's default (cap_ms)"
    spec = check_settle({"cap_ms": 60_000, "launch_cap_ms": 180_000})
    assert spec is not None and spec.as_args()["launch_cap_ms"] == 180_000
    assert spec.longest_ms() == 180_000 and SettleSpec().longest_ms() == 3000
