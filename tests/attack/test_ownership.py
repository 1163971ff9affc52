"""Issue 14 (rows 1, 7-9, 10): every Docker sandbox has one owner at every moment.

- kill -9 of ``cubicle up``/``run``/``drill`` at any point of the creation, then ``gc``: nothing of
  that sandbox is left (it was labelled detached from the start, so it leaked until its TTL);
- ``gc`` never takes a sandbox a live process is creating (it used to sweep networks and proxies
  missing from its snapshot of guest containers);
- one malformed cubicle label no longer stops ``gc`` and ``ls``.

These tests run the real ``cubicle gc`` on a shared engine: they assert only on the objects of the
sandboxes they made themselves.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.conftest import CliRun, Tracker
from tests.orchestrator.support import leftovers
from tests.support.killpoints import paused_at

pytestmark = [pytest.mark.attack, pytest.mark.docker]

DRILL_ENV = {"OPENAI_API_KEY": "offline-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}


def _gc(cli: CliRun) -> subprocess.CompletedProcess[str]:
    done = cli("gc")
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(
    ("command", "point"),
    [
        (("up",), "container"),
        (("up", "--network", "open"), "network"),
        (("up", "--network", "allow:example.com"), "network"),
        (("up", "--network", "allow:example.com"), "proxy"),
        (("up", "--network", "allow:example.com"), "before-container"),
        (("up", "--network", "allow:example.com"), "container"),
        (("run", "say hello", "--network", "allow:example.com"), "proxy"),
        (("run", "say hello"), "container"),
        (("drill", "--loop", "toolset"), "container"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(value[:3]).replace(":", ""),
)
def test_kill9_mid_create_then_gc_leaves_nothing(
    engine: docker.DockerClient,
    sandboxes: Tracker,
    cli: CliRun,
    command: tuple[str, ...],
    point: str,
) -> None:
    with paused_at(point, *command, env=DRILL_ENV) as paused:
        sandboxes.add(paused.sandbox_id)  # removed at teardown whatever happens here
        mine = {L.SANDBOX: paused.sandbox_id}
        assert leftovers(engine, mine), "nothing was made before the kill point"
        paused.kill9()
    assert leftovers(engine, mine), "kill -9 left no chance to clean up"
    collected = _gc(cli)
    assert paused.sandbox_id in collected.stdout.split()
    assert leftovers(engine, mine) == []


def test_up_killed_after_ready_is_detached_and_survives_gc(
    engine: docker.DockerClient, provider: DockerProvider, sandboxes: Tracker, cli: CliRun
) -> None:
    with paused_at("ready", "up") as paused:
        sandboxes.add(paused.sandbox_id)
        paused.kill9()
    assert paused.sandbox_id not in _gc(cli).stdout.split()
    info = provider.describe(paused.sandbox_id)
    assert info is not None and info.ownership == "detached"
    assert Sandbox.attach(paused.sandbox_id).exec(["true"]).exit_code == 0


@pytest.mark.parametrize("point", ["network", "proxy", "before-container", "container"])
def test_gc_never_takes_a_sandbox_a_live_process_is_creating(
    engine: docker.DockerClient,
    provider: DockerProvider,
    sandboxes: Tracker,
    cli: CliRun,
    point: str,
) -> None:
    expired = sandboxes.create(ttl_s=0.5)  # gc has work to do at the same time
    with paused_at(point, "up", "--network", "allow:example.com", "--json") as paused:
        sandboxes.add(paused.sandbox_id)
        before = sorted(leftovers(engine, {L.SANDBOX: paused.sandbox_id}))
        while time.time() <= expired.info.expires_at:
            time.sleep(0.1)
        collected = _gc(cli).stdout.split()
        assert expired.id in collected
        assert paused.sandbox_id not in collected
        assert sorted(leftovers(engine, {L.SANDBOX: paused.sandbox_id})) == before
        status, out, err = paused.resume()
    assert status == 0, err
    assert json.loads(out)["ownership"] == "detached"
    assert Sandbox.attach(paused.sandbox_id).exec(["true"]).exit_code == 0


def test_concurrent_creates_survive_a_gc_running_in_a_loop(
    provider: DockerProvider, sandboxes: Tracker
) -> None:
    """Row 1 unpaused: gc runs back to back while sandboxes (``allow:``, so with a network and a
    proxy made before the guest) are created and expired ones wait for it."""
    for _ in range(3):
        sandboxes.create(ttl_s=0.2)
    stop = threading.Event()
    taken: list[str] = []
    errors: list[BaseException] = []
    passes = [0]

    def collect() -> None:
        while not stop.is_set():
            try:
                taken.extend(DockerProvider(provider.client).gc())
                passes[0] += 1
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    worker = threading.Thread(target=collect)
    worker.start()
    made = []
    try:
        for _ in range(6):
            sandbox = sandboxes.create(network="allow:example.com")
            made.append(sandbox.id)
            assert sandbox.exec(["true"]).exit_code == 0
    finally:
        stop.set()
        worker.join(timeout=120)
    assert not errors, errors
    assert passes[0] >= len(made), f"only {passes[0]} gc passes overlapped {len(made)} creates"
    assert not set(made) & set(taken)
    assert all(provider.describe(sandbox_id) is not None for sandbox_id in made)


def test_malformed_labels_are_skipped_with_a_warning_and_gc_goes_on(
    engine: docker.DockerClient,
    docker_image: str,
    provider: DockerProvider,
    sandboxes: Tracker,
    cli: CliRun,
) -> None:
    expired = sandboxes.create(ttl_s=0.5)
    good = {
        L.ROLE: "guest",
        L.OWNER_PID: "0",
        L.CREATED_AT: "1",
        L.EXPIRES_AT: "2",
        L.SCREEN: "800x600",
    }
    bad_labels = [
        {**good, L.SANDBOX: "dk-.bad"},
        {**good, L.SANDBOX: f"dk-{secrets.token_hex(5)}", L.EXPIRES_AT: "soon"},
        {**good, L.SANDBOX: f"dk-{secrets.token_hex(5)}", L.CREATED_AT: "x"},
    ]
    bad = [
        engine.containers.create(
            docker_image, entrypoint=["true"], labels=labels, network_mode="none"
        )
        for labels in bad_labels
    ]
    try:
        while time.time() <= expired.info.expires_at:
            time.sleep(0.1)
        collected = _gc(cli)
        assert expired.id in collected.stdout.split()
        listed = cli("ls")
        assert listed.returncode == 0, listed.stderr
        for container in bad:
            container.reload()  # still there: skipped, not removed
            assert str(container.name) in collected.stderr
            assert str(container.name) in listed.stderr
        assert "dk-.bad" in collected.stderr and "'soon'" in collected.stderr
        assert "'x'" in listed.stderr
    finally:
        for container in bad:
            container.remove(force=True)
