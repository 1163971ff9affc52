"""Sandbox.create's arguments and the one size parser: refused before anything is created
(no engine needed)."""

from __future__ import annotations

import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.ownership import parse_stamp
from cubicle.orchestrator.provider import SandboxInfo, SandboxSpec, parse_size
from cubicle.orchestrator.sandbox import Sandbox


@pytest.mark.parametrize(
    ("keywords", "named"),
    [
        ({"network": "allow:example.com"}, "network"),
        ({"screen": (800, 600)}, "screen"),
        ({"ttl_s": 60}, "ttl_s"),
        ({"detached": True}, "detached"),
        ({"cpus": 2.0}, "cpus"),
        ({"screen": (800, 600), "cpus": 2.0}, "screen, cpus"),
    ],
)
def test_create_refuses_spec_with_keywords(keywords: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=f"both spec and {named}") as caught:
        Sandbox.create("no-such-backend", spec=SandboxSpec(), **keywords)  # type: ignore[arg-type]
    assert caught.value.hint is not None and "SandboxSpec" in caught.value.hint


def test_create_with_a_spec_alone_goes_on_to_the_backend() -> None:
    with pytest.raises(ConfigError, match="unknown backend 'no-such-backend'"):
        Sandbox.create("no-such-backend", spec=SandboxSpec(screen=(800, 600)))


@pytest.mark.parametrize("text", ["1280x800", "1280X800", " 800x600 ", "1x1"])
def test_sizes_parse(text: str) -> None:
    width, height = parse_size(text)
    assert f"{width}x{height}" == text.strip().lower()


@pytest.mark.parametrize(
    "text", ["", "1280", "1280x", "x800", "0x800", "12a0x800", "-1x5", "1x2x3"]
)
def test_bad_sizes_are_named(text: str) -> None:
    with pytest.raises(ConfigError, match=f"--view wants WIDTHxHEIGHT.*got {text!r}"):
        parse_size(text, "--view")


def test_info_from_labels_keeps_an_unreadable_screen_as_zero() -> None:
    labels = L.create_labels(
        "vm-abcdef0123",
        "guest",
        owner=L.Owner.current(),
        ttl_s=60,
        network="none",
        screen=(800, 600),
    )
    stamp = parse_stamp(labels, id_prefix="vm-")
    info = SandboxInfo.from_labels(
        stamp, labels, provider="vm", state="running", ready=False, detail={}
    )
    assert (info.id, info.screen, info.ownership) == ("vm-abcdef0123", (800, 600), "creating")
    broken = SandboxInfo.from_labels(
        stamp, {**labels, L.SCREEN: "big"}, provider="vm", state="running", ready=True, detail={}
    )
    assert broken.screen == (0, 0) and broken.ownership == stamp.lifetime
