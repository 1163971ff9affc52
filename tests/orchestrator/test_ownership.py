"""The ownership rule (cubicle/orchestrator/ownership.py) on its own: stamps and verdicts, every
state."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.ownership import MalformedStamp, Stamp, parse_stamp, verdict

NOW = 1_000_000.0


def _dead_owner() -> L.Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = L.process_start_ticks(child.pid) or 1
    child.wait()
    return L.Owner(child.pid, start, socket.gethostname())


def _stamp(owner: L.Owner, *, lifetime: str = "owned", expires_at: float = NOW + 60) -> Stamp:
    labels = L.create_labels(
        "dk-0123456789",
        "guest",
        owner=owner,
        ttl_s=expires_at - NOW,
        lifetime=lifetime,  # type: ignore[arg-type]
        network="none",
        screen=(800, 600),
        now=NOW,
    )
    return parse_stamp(labels, id_prefix="dk-")


ALIVE = L.Owner.current()
REMOTE = L.Owner(os.getpid(), 1, "another-host.invalid")


@pytest.mark.parametrize(
    ("owner", "lifetime", "expired", "ready", "taken"),
    [
        # creating: only a dead owner (or a remote one long expired) lets gc take it
        ("alive", "owned", False, False, False),
        ("alive", "owned", True, False, False),
        ("alive", "detached", True, False, False),
        ("dead", "detached", False, False, True),
        ("dead", "owned", False, False, True),
        ("remote", "detached", True, False, False),
        # owned: its process or its expiry
        ("alive", "owned", False, True, False),
        ("alive", "owned", True, True, True),
        ("dead", "owned", False, True, True),
        # detached: its expiry alone
        ("dead", "detached", False, True, False),
        ("dead", "detached", True, True, True),
        ("remote", "detached", True, True, True),
    ],
)
def test_verdict_for_every_state(
    owner: str, lifetime: str, expired: bool, ready: bool, taken: bool
) -> None:
    who = {"alive": ALIVE, "dead": _dead_owner(), "remote": REMOTE}[owner]
    stamp = _stamp(who, lifetime=lifetime, expires_at=NOW - 1 if expired else NOW + 60)
    assert (verdict(stamp, lambda: ready, NOW) is not None) is taken


def test_a_remote_creating_sandbox_goes_long_after_its_expiry() -> None:
    stamp = _stamp(REMOTE, expires_at=NOW - 601)
    assert verdict(stamp, lambda: False, NOW) is not None


def test_the_ready_mark_is_read_only_after_the_owner_was_judged() -> None:
    reads: list[str] = []

    def ready() -> bool:
        reads.append("read")
        return False

    assert verdict(_stamp(ALIVE), ready, NOW) is None
    assert reads == [], "a live, unexpired owner needs no read of the mark"
    assert verdict(_stamp(_dead_owner()), ready, NOW) is not None
    assert reads == ["read"]


def test_sandboxes_from_before_lifetimes_keep_their_meaning() -> None:
    labels = {
        L.SANDBOX: "dk-abcdef0123",
        L.OWNER_PID: "0",
        L.CREATED_AT: "1",
        L.EXPIRES_AT: "2",
    }
    assert parse_stamp(labels).lifetime == "detached"
    assert parse_stamp({**labels, L.OWNER_PID: "42"}).lifetime == "owned"


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        (L.SANDBOX, "dk-.bad", "dk-.bad"),
        (L.SANDBOX, "vm-0123456789", "vm-0123456789"),
        (L.EXPIRES_AT, "soon", "soon"),
        (L.EXPIRES_AT, "nan", "nan"),
        (L.CREATED_AT, "x", "'x'"),
        (L.OWNER_PID, "-3", "-3"),
        (L.OWNER_PID, "1.5", "1.5"),
        (L.LIFETIME, "forever", "forever"),
    ],
)
def test_malformed_labels_name_the_label_and_value(key: str, value: str, named: str) -> None:
    labels = L.create_labels(
        "dk-0123456789", "guest", owner=ALIVE, ttl_s=60, network="none", screen=(800, 600)
    )
    with pytest.raises(MalformedStamp) as raised:
        parse_stamp({**labels, key: value}, id_prefix="dk-")
    assert key in str(raised.value) and named in str(raised.value)
