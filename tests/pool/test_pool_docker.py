"""Warm pools on Docker: claims are atomic and fresh, drains and gc leave nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import docker
import docker.errors
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.pool import fill, refill, registry
from cubicle.orchestrator.pool.registry import PoolRecord
from cubicle.orchestrator.providers.docker import pool_members
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.waiting import Deadline, poll
from tests.desktop.checks import assert_panel_drawn, screenshot
from tests.orchestrator.conftest import REPO, CliRun
from tests.orchestrator.support import leftovers
from tests.pool.conftest import Pools

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _home(sandbox: Sandbox) -> list[str]:
    """Every path under the desktop user's home, with its size (what a user could find)."""
    result = sandbox.exec(["find", "/home/cubicle", "-printf", "%P %s\n"])
    assert result.exit_code == 0, result.stderr
    return sorted(result.stdout.splitlines())


def test_claim_takes_a_member_and_pool_false_opts_out(pools: Pools) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 2)
    members = {m.sandbox_id for m in pools.provider.pool_members().members(record.key)}
    assert len(members) == 2

    with pools.claim(spec) as sandbox:
        assert sandbox.id in members
        assert sandbox.info.ownership == "owned" and sandbox.info.state == "running"
        with sandbox.connect() as client:
            first = screenshot(client)
        assert first.size == spec.screen
        assert_panel_drawn(first)  # a claimed desktop is as ready as a new one
        info = pools.provider.describe(sandbox.id)
        assert info is not None and info.detail["container"] == f"cubicle-{sandbox.id}"
        assert sandbox.id not in {m.sandbox_id for m in pools.provider.pool_members().members()}

    with pools.claim(spec, pool=False) as cold:
        assert cold.id not in members, "pool=False claimed a member"
    with pools.claim(pools.spec()) as other_shape:
        assert other_shape.id not in members, "a request of another shape claimed a member"


def test_an_unclaimed_member_cannot_be_used_by_id(pools: Pools, cli: CliRun) -> None:
    record = pools.fill(pools.spec(), 1)
    (member,) = pools.provider.pool_members().members(record.key)
    for args in (
        ["exec", member.sandbox_id, "--", "touch", "/home/cubicle/used"],
        ["screenshot", member.sandbox_id, "-o", "/dev/null"],
        ["down", member.sandbox_id],
        ["view", member.sandbox_id, "--takeover"],
    ):
        refused = cli(*args)
        assert refused.returncode == 5, refused.stderr
        assert "unclaimed warm-pool member" in refused.stderr
    assert pools.provider.pool_members().members(record.key) == [member]
    with pools.claim(pools.spec(screen=record.shape.screen)) as claimed:
        assert claimed.id == member.sandbox_id
        assert claimed.exec(["test", "-e", "/home/cubicle/used"]).exit_code == 1


def test_concurrent_takes_of_one_member_have_one_winner(pools: Pools) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 1)
    (member,) = pools.provider.pool_members().members(record.key)
    start = threading.Barrier(8)

    def race(_: int) -> bool:
        provider = DockerProvider()
        start.wait()
        return provider.pool_members().take(member, spec)

    with ThreadPoolExecutor(8) as workers:
        wins = list(workers.map(race, range(8)))
    assert wins.count(True) == 1, wins


def test_concurrent_claims_never_share(pools: Pools) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 4)
    members = {m.sandbox_id for m in pools.provider.pool_members().members(record.key)}
    start = threading.Barrier(6)

    def claim(_: int) -> Sandbox:
        start.wait()
        return pools.claim(spec)

    with ThreadPoolExecutor(6) as workers:
        got = list(workers.map(claim, range(6)))
    try:
        ids = [s.id for s in got]
        assert len(set(ids)) == 6, f"two claims got the same sandbox: {ids}"
        claimed = [i for i in ids if i in members]
        assert len(claimed) == 4, f"claims missed ready members: {ids} vs {members}"
        # each claim is marked once, naming this process as the owner
        for sandbox_id in claimed:
            (marker,) = pools.provider.client.containers.list(
                all=True, filters={"label": [f"{L.SANDBOX}={sandbox_id}", f"{L.ROLE}=claim"]}
            )
            assert marker.labels[L.OWNER_PID] == str(os.getpid())
            assert marker.labels[L.LIFETIME] == "owned"
    finally:
        for sandbox in got:
            sandbox.destroy()


def test_claimed_sandbox_has_a_fresh_home(pools: Pools) -> None:
    spec = pools.spec()
    pools.fill(spec, 2)
    with pools.claim(spec) as first:
        assert first.exec(["sh", "-c", "echo secret > ~/left-behind.txt"]).exit_code == 0
    with pools.claim(spec) as second, pools.claim(spec, pool=False) as cold:
        assert second.id != first.id
        home = _home(second)
        assert not any("left-behind" in line for line in home), home
        assert home == _home(cold), "a claimed home differs from a new sandbox's home"


def test_drained_pool_leaves_nothing(pools: Pools, engine: docker.DockerClient) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 2)
    first = {m.sandbox_id for m in pools.provider.pool_members().members(record.key)}
    claimed = pools.claim(spec)  # starts the refiller
    try:
        deadline = time.monotonic() + 30
        while not refill.refill_pids(record.key) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refill.refill_pids(record.key), "no refiller after a claim"
        removed = set(_drain_cli(record.key))
        assert first - {claimed.id} <= removed
        assert registry.read(record.key) is None
        assert not refill.refill_pids(record.key), "drain left the refiller running"
        assert not pools.provider.pool_members().members(record.key)
        for sandbox_id in removed:
            assert not leftovers(engine, {L.SANDBOX: sandbox_id}), sandbox_id
        # the claimed sandbox is its claimer's: untouched and working
        assert claimed.screenshot()[0]["width"] == spec.screen[0]
    finally:
        claimed.destroy()


def _drain_cli(key: str) -> list[str]:
    from cubicle.orchestrator.pool import admin  # noqa: PLC0415

    return admin.drain(key)


def test_gc_collects_expired_members_and_pools(
    pools: Pools, cli: CliRun, engine: docker.DockerClient
) -> None:
    spec = pools.spec(ttl_s=3.0)
    record = PoolRecord(
        shape=_shape(pools.provider, spec),
        size=1,
        expires_at=time.time() + 3.0,
    )
    registry.write(record)
    expired = Sandbox.create(
        spec=fill.member_spec(record),
        provider=DockerProvider().pool_members().member_provider(record.key),
        pool=False,
    )
    pools.ids.add(expired.id)
    live = pools.spec()
    live_record = pools.fill(live, 1)
    (alive,) = pools.provider.pool_members().members(live_record.key)
    while time.time() < record.expires_at + 0.5:
        time.sleep(0.1)

    # effects, not gc's exit code or list: on a shared engine another process's gc may take the
    # expired member first, and its VM half may fail on someone else's VM
    gc = cli("gc")
    assert f"pool {record.key}: expired" in gc.stderr, gc.stderr
    assert not leftovers(engine, {L.SANDBOX: expired.id})
    assert registry.read(record.key) is None
    assert alive.sandbox_id not in gc.stdout, "gc took a member of a live pool"
    assert pools.provider.pool_members().members(live_record.key)


def _shape(provider: DockerProvider, spec: object) -> registry.PoolShape:
    from cubicle.orchestrator.pool.claim import shape_for  # noqa: PLC0415

    return shape_for(provider, spec)  # type: ignore[arg-type]


CLAIMER = """
import sys, time
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.provider import SandboxSpec
sandbox = Sandbox.create(spec=SandboxSpec(screen=(1000, int(sys.argv[1])), ttl_s=900))
print(sandbox.id, flush=True)
time.sleep(600)
"""


def test_gc_takes_a_claimed_sandbox_once_its_claimer_is_gone(
    pools: Pools, cli: CliRun, engine: docker.DockerClient
) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 1)
    (member,) = pools.provider.pool_members().members(record.key)
    refill.stop_refills(record.key)
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(spec.screen[1])],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert child.stdout is not None
        claimed = child.stdout.readline().strip()
        assert claimed == member.sandbox_id
        markers = engine.containers.list(
            all=True, filters={"label": [f"{L.SANDBOX}={claimed}", f"{L.ROLE}=claim"]}
        )
        assert [c.name for c in markers] == [marks.claim_marker_name(claimed)]
        assert markers[0].labels[L.OWNER_PID] == str(child.pid)
        assert claimed not in cli("gc").stdout.split(), "gc took a sandbox whose claimer lives"
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    gc = cli("gc")
    assert not leftovers(engine, {L.SANDBOX: claimed}), gc.stdout + gc.stderr


def _python(code: str, *args: str) -> str:
    """Run ``code`` in a new interpreter with ``args``; its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


HALF_CLAIM = """
import sys
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.docker.provider import DockerProvider
members = DockerProvider().pool_members()
(member,) = [m for m in members.members(sys.argv[1]) if m.sandbox_id == sys.argv[2]]
assert members.take(member, SandboxSpec(ttl_s=900))
# exits here, as if killed between the claim marker and the rename
"""


def test_a_claimer_gone_between_marker_and_rename_leaves_nothing_to_claim_and_gc_takes_it(
    pools: Pools, cli: CliRun, engine: docker.DockerClient
) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 1)
    (member,) = pools.provider.pool_members().members(record.key)
    _python(HALF_CLAIM, record.key, member.sandbox_id)
    info = pools.provider.describe(member.sandbox_id)
    assert info is not None and info.ownership == "owned", "the marker's stamp must count"
    assert not pools.provider.pool_members().take(member, spec), "a claimed member was taken again"
    assert not pools.provider.pool_members().members(record.key), "a claimed member is listed"
    with pools.claim(spec, pool=True) as other:
        assert other.id != member.sandbox_id
    cli("gc")
    assert not leftovers(engine, {L.SANDBOX: member.sandbox_id})


FRESH_CREATE = """
import sys
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.sandbox import Sandbox
assert not [m for m in sys.modules if m.startswith("cubicle.orchestrator.pool")], "pool loaded"
said = []
spec = SandboxSpec(screen=(int(sys.argv[1]), int(sys.argv[2])), ttl_s=900)
with Sandbox.create(spec=spec, progress=said.append) as sandbox:
    print(sandbox.id, any("claimed from a warm pool" in line for line in said))
"""


def test_a_fresh_interpreter_that_never_imported_the_pool_claims(pools: Pools) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 1)
    (member,) = pools.provider.pool_members().members(record.key)
    sandbox_id, claimed = _python(FRESH_CREATE, *map(str, spec.screen)).split()
    pools.ids.add(sandbox_id)
    assert (sandbox_id, claimed) == (member.sandbox_id, "True")


def _bridge_execs(provider: DockerProvider, container_id: str) -> dict[str, dict[str, object]]:
    """The container's ``docker exec`` instances of the agent bridge, by id (their inspection)."""
    api = provider.client.api
    found = {}
    for exec_id in api.inspect_container(container_id)["ExecIDs"] or []:
        with contextlib.suppress(docker.errors.NotFound):  # the engine forgets ended ones
            shown = api.exec_inspect(exec_id)
            if "cubicle_guest.bridge" in shown["ProcessConfig"]["arguments"]:
                found[exec_id] = shown
    return found


def _exec_events(provider: DockerProvider, container_id: str, since: int) -> list[str]:
    """The engine's exec events of the container since ``since`` (whole seconds): ``start
    <command>`` and ``die <exit code>``, in order."""
    found = []
    stream = provider.client.events(
        since=since, until=int(time.time()) + 1, filters={"container": container_id}, decode=True
    )
    with contextlib.closing(stream):
        for event in stream:
            action = str(event.get("Action", ""))
            if action.startswith("exec_start"):
                found.append("start " + action.partition(": ")[2])
            elif action == "exec_die":
                found.append(f"die {event['Actor']['Attributes'].get('exitCode')}")
    return found


def test_a_lost_claim_closes_its_early_connection_unused(pools: Pools) -> None:
    spec = pools.spec()
    record = pools.fill(spec, 1)
    (member,) = pools.provider.pool_members().members(record.key)
    assert pools.provider.pool_members().take(member, spec)  # another claimer was first
    since = int(time.time()) - 1
    earlier = len(_exec_events(pools.provider, member.container_id, since))  # the filler's

    assert pools.provider.pool_members().claim_member(member, spec) is None

    # at once as a rule; when the engine loses the close (moby/moby#37870), the bridge ends by
    # itself once not spoken to for EARLY_STREAM_UNUSED_S
    for _ in poll(Deadline(pool_members.EARLY_STREAM_UNUSED_S + 15), 0.1):
        if not _bridge_execs(pools.provider, member.container_id):
            break
    assert not _bridge_execs(pools.provider, member.container_id), "a bridge still runs"
    # the loser's bridge was started early and ended cleanly: a bridge ends with 0 only when its
    # stdin ends (the claimer closed the stream) or, never spoken to, by its own bound; either
    # way it never reached the agent
    events = _exec_events(pools.provider, member.container_id, since)[earlier:]
    assert len(events) == 2 and "cubicle_guest.bridge" in events[0] and events[1] == "die 0", events
    # the winner's member is untouched: still running, still named as a member
    info = pools.provider.describe(member.sandbox_id)
    assert info is not None and info.state == "running"
    assert info.detail["container"] == marks.member_name(member.sandbox_id, record.key)


def test_the_first_connect_reuses_the_connection_create_opened(pools: Pools) -> None:
    spec = pools.spec()
    pools.fill(spec, 1)
    for pool in (True, False):  # a claim, then a cold start
        with pools.claim(spec, pool=pool) as sandbox:
            container_id = str(pools.provider._guest(sandbox.id).id)
            opened = set(_bridge_execs(pools.provider, container_id))
            with sandbox.connect() as first:
                assert first.screenshot().blob
                assert set(_bridge_execs(pools.provider, container_id)) == opened, pool
            with sandbox.connect() as second:
                assert second.screenshot().blob
                assert len(set(_bridge_execs(pools.provider, container_id)) - opened) == 1
