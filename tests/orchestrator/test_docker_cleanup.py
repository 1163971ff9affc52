"""Nothing leaks (gc after SIGKILL of the owner, expiry, signals, many cycles); gc spares others."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.conftest import REPO, CliRun, Tracker
from tests.orchestrator.support import leftovers

pytestmark = [pytest.mark.docker]

OWNER_SCRIPT = """
import sys, time
from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
if sys.argv[1] == "guarded":
    with teardown_on_signals() as guard:
        sandbox = guard.add(Sandbox.create())
        print(sandbox.id, flush=True)
        time.sleep(600)
else:
    sandbox = Sandbox.create()
    print(sandbox.id, flush=True)
    time.sleep(600)
"""


@contextmanager
def owner_process(
    provider: DockerProvider, mode: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A child process that creates a sandbox and sleeps; yields it and the sandbox id.

    On exit the child is killed (by pid) and its sandbox destroyed, whatever the test did.
    """
    child = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    sandbox_id = ""
    try:
        assert child.stdout is not None
        sandbox_id = child.stdout.readline().strip()
        assert sandbox_id.startswith("dk-"), child.stderr.read() if child.stderr else ""
        yield child, sandbox_id
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)
        if sandbox_id:
            provider.destroy(sandbox_id)


@contextmanager
def canary(engine: docker.DockerClient, image: str) -> Iterator[docker.models.containers.Container]:
    """An unrelated container (labelled, but not as cubicle's) that gc must not touch."""
    container = engine.containers.run(
        image,
        entrypoint=["sleep", "600"],
        labels={"io.example.canary": "1", "cubicle.sandbox": "not-ours"},
        network_mode="none",
        detach=True,
    )
    try:
        yield container
    finally:
        container.remove(force=True)


def test_gc_after_sigkill_of_the_owner_spares_everything_else(
    provider: DockerProvider,
    sandboxes: Tracker,
    engine: docker.DockerClient,
    docker_image: str,
    cli: CliRun,
) -> None:
    mine = sandboxes.create()  # owned by this (live) process: must survive
    detached = sandboxes.create(detached=True)  # no owner, not expired: must survive
    with canary(engine, docker_image) as other, owner_process(provider, "plain") as (child, orphan):
        assert leftovers(engine, {L.SANDBOX: orphan})
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert leftovers(engine, {L.SANDBOX: orphan}), "SIGKILL left no chance to clean up"

        collected = cli("gc")
        assert collected.returncode == 0, collected.stderr
        assert orphan in collected.stdout.split()
        assert leftovers(engine, {L.SANDBOX: orphan}) == []
        other.reload()
        assert other.status == "running"
    assert {mine.id, detached.id} <= {info.id for info in provider.list()}


def test_gc_removes_expired_sandboxes(provider: DockerProvider, sandboxes: Tracker) -> None:
    sandbox = sandboxes.create(ttl_s=1.0)
    while time.time() <= sandbox.info.expires_at:
        time.sleep(0.2)
    assert sandbox.id in provider.gc()
    assert provider.describe(sandbox.id) is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signals_tear_down(
    provider: DockerProvider, engine: docker.DockerClient, signum: signal.Signals
) -> None:
    with owner_process(provider, "guarded") as (child, sandbox_id):
        child.send_signal(signum)
        child.wait(timeout=60)
        assert child.returncode != 0
        if signum == signal.SIGTERM:
            assert child.returncode == 128 + signal.SIGTERM
        assert leftovers(engine, {L.SANDBOX: sandbox_id}) == []


@pytest.mark.slow
def test_fifty_create_destroy_cycles_leave_nothing(
    engine: docker.DockerClient, provider: DockerProvider
) -> None:
    before = set(leftovers(engine, {L.OWNER_PID: str(os.getpid())}))
    ids = []
    for cycle in range(50):
        network = "allow:example.com" if cycle % 5 == 0 else "none"
        with Sandbox.create(network=network) as sandbox:
            ids.append(sandbox.id)
            assert sandbox.exec(["true"]).exit_code == 0
        assert leftovers(engine, {L.SANDBOX: sandbox.id}) == []
    assert len(set(ids)) == 50
    assert set(leftovers(engine, {L.OWNER_PID: str(os.getpid())})) == before
