"""Warm pools on VMs (libvirt/QEMU, TCG here): claims are atomic, fresh and never shared, an
unclaimed member cannot be used, drains and gc leave nothing.

Members restore from the default shape's saved state
(:mod:`cubicle.orchestrator.providers.vm.warm`): each test's pools differ from every other pool by
their CPU limit only (``cpus`` below 1 is one vCPU, so no new saved state is booted), and are
drained at teardown with every sandbox they gave out checked gone (domain, QEMU, run folder).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from cubicle.orchestrator.pool import admin, fill, refill, registry
from cubicle.orchestrator.pool.claim import shape_for
from cubicle.orchestrator.pool.registry import PoolRecord
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider, run_marks
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.waiting import Deadline, poll
from tests.desktop.checks import assert_panel_drawn, screenshot
from tests.pool.conftest import Pools
from tests.support.cli import run_cli
from tests.vm.conftest import REPO, assert_gone, vm_provider

__all__ = ["vm_provider"]

pytestmark = [pytest.mark.vm, pytest.mark.slow]

_CPUS = itertools.count(1)


@pytest.fixture
def vm_pools(
    vm_provider: VmProvider,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Pools]:
    monkeypatch.setenv(registry.DIR_ENV, str(tmp_path_factory.mktemp("vm-pools")))
    made = Pools(vm_provider, backend="vm")
    yield made
    for record in made.records:
        made.ids.update(admin.drain(record.key))
    assert not refill.refill_pids(), "a refiller outlived its drained pool"
    for sandbox_id in made.ids:  # what the test claimed and kept is removed here
        vm_provider.destroy(sandbox_id)
    for sandbox_id in made.ids:
        assert_gone(vm_provider, sandbox_id)


def _spec(**changes: object) -> SandboxSpec:
    """A spec of a pool shape no other test asks for (its CPU limit), one vCPU."""
    fields: dict[str, object] = {"cpus": 1 - (next(_CPUS) + os.getpid() % 100 * 10) / 2000}
    fields.update({"ttl_s": 900.0, **changes})
    return SandboxSpec(**fields)  # type: ignore[arg-type]


def _home(sandbox: Sandbox) -> list[str]:
    result = sandbox.exec(["find", "/home/cubicle", "-printf", "%P %s\n"], timeout=120)
    assert result.exit_code == 0, result.stderr
    return sorted(result.stdout.splitlines())


def test_vm_claims_are_atomic_fresh_and_never_shared(vm_pools: Pools) -> None:
    spec = _spec()
    record = vm_pools.fill(spec, 3)
    members = vm_pools.provider.pool_members().members(record.key)
    assert len(members) == 3 and all(m.state == "running" for m in members)
    first = members[0]

    # an unclaimed member is never handed out by id
    refused = run_cli("exec", first.sandbox_id, "--", "touch", "/home/cubicle/used")
    assert refused.returncode == 5, refused.stderr
    assert "unclaimed warm-pool member" in refused.stderr

    # eight racing takes of one member: one winner
    start = threading.Barrier(8)

    def race(_: int) -> bool:
        start.wait()
        return VmProvider().pool_members().take(first, spec)

    with ThreadPoolExecutor(8) as workers:
        wins = list(workers.map(race, range(8)))
    assert wins.count(True) == 1, wins
    vm_pools.ids.add(first.sandbox_id)  # claimed by this process: removed at teardown
    run = vm_pools.provider.run_dir(first.sandbox_id)
    claim = run_marks.claim_labels(run)
    assert claim is not None and claim["io.cubicle.owner-pid"] == str(os.getpid())
    assert first.sandbox_id not in {
        m.sandbox_id for m in vm_pools.provider.pool_members().members()
    }

    # three concurrent claims on the two members left: two claims, one start; none shared
    left = {m.sandbox_id for m in vm_pools.provider.pool_members().members(record.key)}
    assert len(left) == 2
    barrier = threading.Barrier(3)

    def claim_one(_: int) -> Sandbox:
        barrier.wait()
        return vm_pools.claim(spec, ready_timeout_s=240)

    with ThreadPoolExecutor(3) as workers:
        got = list(workers.map(claim_one, range(3)))
    try:
        ids = [s.id for s in got]
        assert len(set(ids)) == 3, f"two claims got the same sandbox: {ids}"
        claimed = [s for s in got if s.id in left]
        assert len(claimed) == 2, f"claims missed ready members: {ids} vs {left}"
        started = next(s for s in got if s.id not in left)
        for sandbox in claimed:
            assert sandbox.info.ownership == "owned" and sandbox.info.state == "running"
            with sandbox.connect() as client:
                image = screenshot(client)
            assert image.size == spec.screen
            assert_panel_drawn(image)  # a claimed desktop is as ready as a new one
        # a claimed home is a new sandbox's home: nothing of the filler's, nothing used
        assert _home(claimed[0]) == _home(started)
    finally:
        for sandbox in got:
            sandbox.destroy()


@pytest.mark.parametrize("record", ["kept", "lost"])
def test_a_drained_vm_pool_leaves_nothing(
    vm_pools: Pools, vm_provider: VmProvider, record: str
) -> None:
    """Also when the pool's record is gone (``lost``): the key is then unknown, and drain looks
    for its members, and for what its refiller was still making, on every backend (the VM
    backend is not the first it asks)."""
    spec = _spec()
    before = {info.id for info in vm_provider.list()}
    pool = vm_pools.fill(spec, 2)
    members = {m.sandbox_id for m in vm_provider.pool_members().members(pool.key)}
    claimed = vm_pools.claim(spec)  # starts the refiller
    try:
        assert claimed.id in members
        for _ in poll(Deadline(30), 0.05):  # drained while it runs (it starts detached)
            if refill.refill_pids(pool.key):
                break
        assert refill.refill_pids(pool.key), "no refiller after a claim"
        if record == "lost":
            registry.remove(pool.key)
        removed = set(admin.drain(pool.key))
        left = {info.id for info in vm_provider.list()} - before - {claimed.id}
        assert left == set(), f"drain left {left}"
        assert members - {claimed.id} <= removed
        assert registry.read(pool.key) is None
        assert not refill.refill_pids(pool.key), "drain left the refiller running"
        assert not vm_provider.pool_members().members(pool.key)
        for sandbox_id in removed:
            assert_gone(vm_provider, sandbox_id)
        # the claimed sandbox is its claimer's: untouched and working
        assert claimed.screenshot()[0]["width"] == spec.screen[0]
    finally:
        claimed.destroy()
    assert_gone(vm_provider, claimed.id)


def test_gc_collects_expired_vm_members(vm_pools: Pools, vm_provider: VmProvider) -> None:
    spec = _spec(ttl_s=3.0)
    record = PoolRecord(shape=shape_for(vm_provider, spec), size=1, expires_at=time.time() + 3.0)
    registry.write(record)
    expired = Sandbox.create(
        spec=fill.member_spec(record),
        provider=VmProvider().pool_members().member_provider(record.key),
        pool=False,
        ready_timeout_s=240,
    )
    vm_pools.ids.add(expired.id)
    assert expired.info.ownership == "pool"
    while time.time() < record.expires_at + 0.5:
        time.sleep(0.1)
    gc = run_cli("gc")
    assert gc.returncode == 0, gc.stderr
    assert f"pool {record.key}: expired" in gc.stderr, gc.stderr
    assert_gone(vm_provider, expired.id)
    assert registry.read(record.key) is None


CLAIMER = """
import sys, time
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
members = VmProvider().pool_members()
(member,) = [m for m in members.members(sys.argv[1]) if m.sandbox_id == sys.argv[2]]
assert members.take(member, SandboxSpec(ttl_s=900))
print("claimed", flush=True)
time.sleep(600)
"""


def test_gc_takes_a_claimed_vm_once_its_claimer_is_gone(
    vm_pools: Pools, vm_provider: VmProvider
) -> None:
    """The claim's stamp counts: ``ls`` shows the member owned by its claimer, ``gc`` leaves it
    while the claimer lives and takes it once the claimer is killed."""
    spec = _spec()
    record = vm_pools.fill(spec, 1)
    (member,) = vm_provider.pool_members().members(record.key)
    vm_pools.ids.add(member.sandbox_id)
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, record.key, member.sandbox_id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "claimed"
        info = vm_provider.describe(member.sandbox_id)
        assert info is not None and (info.ownership, info.owner_pid) == ("owned", child.pid)
        assert not vm_provider.pool_members().members(record.key), "a claimed member is listed"
        gc = run_cli("gc")
        assert member.sandbox_id not in gc.stdout.split(), "gc took a VM whose claimer lives"
        assert vm_provider.describe(member.sandbox_id) is not None
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    gc = run_cli("gc")
    assert gc.returncode == 0, gc.stderr
    assert_gone(vm_provider, member.sandbox_id)
