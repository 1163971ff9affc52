"""cubicle.orchestrator.labels: the reserved namespace, and who counts as a live owner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ConfigError


def make(owner: L.Owner, **extra: str) -> dict[str, str]:
    return L.create_labels(
        "dk-0123456789",
        "guest",
        owner=owner,
        ttl_s=60,
        network="none",
        screen=(1280, 800),
        extra=extra or None,
        now=1000.0,
    )


def test_create_labels_sets_every_field_and_keeps_caller_labels() -> None:
    extra = {"com.example.team": "qa"}
    labels = L.create_labels(
        "dk-0123456789",
        "egress",
        owner=L.Owner.current(),
        ttl_s=60,
        network="allow:a.test",
        screen=(800, 600),
        extra=extra,
        now=1000.0,
    )
    assert extra == {"com.example.team": "qa"}  # not modified
    assert labels["com.example.team"] == "qa"
    assert labels[L.SANDBOX] == "dk-0123456789"
    assert labels[L.ROLE] == "egress"
    assert labels[L.OWNER_PID] == str(os.getpid())
    assert labels[L.OWNER_HOST] == socket.gethostname()
    assert float(labels[L.EXPIRES_AT]) == 1060.0
    assert labels[L.SCREEN] == "800x600"
    assert labels[L.NETWORK] == "allow:a.test"


def test_create_labels_refuses_the_reserved_namespace() -> None:
    with pytest.raises(ConfigError, match=r"io\.cubicle\.sandbox.*reserved namespace"):
        make(L.Owner.current(), **{"io.cubicle.sandbox": "dk-evil"})


def test_owner_alive() -> None:
    assert L.owner_alive(make(L.Owner.current()))
    assert L.owner_alive(make(L.Owner(0, 0, socket.gethostname())))
    elsewhere = L.Owner(1, 1, socket.gethostname() + "-other-host")
    assert L.owner_alive(make(elsewhere)), "pids of other hosts are not judged"

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = L.process_start_ticks(child.pid)
    child.wait()
    assert start is not None
    assert not L.owner_alive(make(L.Owner(child.pid, start, socket.gethostname())))

    me = L.Owner.current()
    reused = L.Owner(me.pid, me.start_ticks + 1, me.host)
    assert not L.owner_alive(make(reused)), "a reused pid is not the owner"
