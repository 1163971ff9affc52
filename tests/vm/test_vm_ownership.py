"""Issue 14 on VMs (rows 7-9, 10): kill -9 of ``cubicle up``, ``run`` or ``drill`` mid-start, then
``gc``, leaves no domain, libvirt network, firewall rule, proxy process or run folder (overlay,
socket, labels) of that sandbox; ``gc`` never takes one a live process is creating; malformed
domain metadata is skipped with a warning.

The kill points (:mod:`tests.support.killpoints`) need no boot: the creator is killed before its
guest could answer. ``allow:`` sandboxes cold-boot (points proxy, before-container,
container); ``none`` ones are restored from a warm state (before-container: before the restore;
container: restored). Only the objects of the sandboxes made here are asserted on (``gc`` runs on
a shared host).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET

import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import network as vm_network
from cubicle.orchestrator.providers.vm.domain import METADATA_NS
from tests.support.killpoints import REPO, paused_at
from tests.vm.conftest import assert_gone, qemu_pids_using

pytestmark = [pytest.mark.attack, pytest.mark.vm, pytest.mark.slow]

OFFLINE_ENV = {"OPENAI_API_KEY": "offline-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
"""``run`` and ``drill`` never reach a model here: they are killed while creating."""
RUN_ALLOW = ("run", "say hello", "--backend", "vm", "--network", "allow:example.com")
RUN_NONE = ("run", "say hello", "--backend", "vm")
DRILL = ("drill", "--backend", "vm", "--loop", "toolset")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cubicle.orchestrator.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def _gc() -> subprocess.CompletedProcess[str]:
    done = _cli("gc")
    assert done.returncode == 0, done.stderr
    return done


def _pieces(provider: VmProvider, sandbox_id: str) -> list[str]:
    """Every kind of object of ``sandbox_id`` that exists: domain, network, rule, proxy, run."""
    found = [
        kind
        for kind, ids in vm_network.leftovers(provider.conn, provider.home).items()
        if sandbox_id in ids
    ]
    if provider.describe(sandbox_id) is not None:
        found.append("domain")
    if (provider.home / "run" / sandbox_id).exists():
        found.append("run")
    return sorted(found)


@pytest.mark.parametrize(
    ("point", "made"),
    [
        # no libvirt network and no firewall rule: the proxy is on the guest's channel
        ("proxy", ["proxy", "run"]),
        ("container", ["domain", "proxy", "run"]),
    ],
)
def test_kill9_of_up_allow_mid_start_then_gc_leaves_nothing(
    vm_provider: VmProvider, leak_check: list[str], point: str, made: list[str]
) -> None:
    with paused_at(
        point, "up", "--backend", "vm", "--network", "allow:example.com", timeout=300
    ) as paused:
        sandbox_id = paused.sandbox_id
        leak_check.append(sandbox_id)
        assert _pieces(vm_provider, sandbox_id) == made
        # a live creator's sandbox is never taken, whatever gc listed
        assert sandbox_id not in _gc().stdout.split()
        assert _pieces(vm_provider, sandbox_id) == made
        paused.kill9()
    assert _pieces(vm_provider, sandbox_id) == made, "kill -9 left no chance to clean up"
    _gc()  # on a shared host another process's gc may collect the orphan first: judge the effect
    assert _pieces(vm_provider, sandbox_id) == []
    assert_gone(vm_provider, sandbox_id)
    assert qemu_pids_using(vm_provider.home / "run" / sandbox_id) == []


KILLS = {
    "run-allow-proxy": (RUN_ALLOW, "proxy", ["proxy", "run"]),
    "run-allow-before-domain": (RUN_ALLOW, "before-container", ["proxy", "run"]),
    "run-allow-domain": (RUN_ALLOW, "container", ["domain", "proxy", "run"]),
    "run-warm-before-restore": (RUN_NONE, "before-container", ["run"]),
    "run-warm-restored": (RUN_NONE, "container", ["domain", "run"]),
    "drill-warm-before-restore": (DRILL, "before-container", ["run"]),
    "drill-warm-restored": (DRILL, "container", ["domain", "run"]),
}


@pytest.mark.parametrize("case", KILLS)
def test_kill9_of_run_and_drill_mid_start_then_gc_leaves_nothing(
    vm_provider: VmProvider, leak_check: list[str], case: str
) -> None:
    command, point, made = KILLS[case]
    with paused_at(point, *command, env=OFFLINE_ENV, timeout=300) as paused:
        sandbox_id = paused.sandbox_id
        leak_check.append(sandbox_id)
        assert _pieces(vm_provider, sandbox_id) == made
        assert sandbox_id not in _gc().stdout.split(), "gc took a sandbox its live creator makes"
        paused.kill9()
    assert _pieces(vm_provider, sandbox_id) == made, "kill -9 left no chance to clean up"
    _gc()  # on a shared host another process's gc may collect the orphan first: judge the effect
    assert _pieces(vm_provider, sandbox_id) == []
    assert_gone(vm_provider, sandbox_id)


def test_kill9_before_a_restore_from_a_copy_then_gc_leaves_nothing(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """With its one warm slot held, ``up`` copies the slot's saved state (~200 MB) into the new
    sandbox's run folder and is killed there, before the restore: the copy is in that labelled
    folder, so ``gc`` removes it with the folder."""
    one_slot = VmProvider(warm_slots=1)
    one_slot.image = vm_provider.image
    holder = one_slot.create(SandboxSpec())
    leak_check.append(holder.id)
    try:
        assert holder.detail["start"] == "warm:0"
        env = {"CUBICLE_VM_WARM_SLOTS": "1", "CUBICLE_VM_IMAGE": str(vm_provider.image)}
        with paused_at("state-copy", "up", "--backend", "vm", env=env, timeout=300) as paused:
            sandbox_id = paused.sandbox_id
            leak_check.append(sandbox_id)
            copy = vm_provider.home / "run" / sandbox_id / "state.save"
            assert copy.stat().st_size > 50_000_000, "no copy of the saved state was made"
            assert _pieces(vm_provider, sandbox_id) == ["run"]
            assert sandbox_id not in _gc().stdout.split(), "gc took a sandbox being created"
            paused.kill9()
        assert copy.exists(), "kill -9 left no chance to clean up"
        _gc()
        assert _pieces(vm_provider, sandbox_id) == []
        assert_gone(vm_provider, sandbox_id)
        assert one_slot.describe(holder.id) is not None, "gc took the live holder's sandbox"
    finally:
        one_slot.destroy(holder.id)


def _bad_domain_xml(name: str, labels: dict[str, str]) -> str:
    ET.register_namespace("cubicle", METADATA_NS)
    domain = ET.Element("domain", type="qemu")
    ET.SubElement(domain, "name").text = name
    ET.SubElement(domain, "uuid").text = str(uuid.uuid4())
    ET.SubElement(domain, "memory", unit="MiB").text = "64"
    os_element = ET.SubElement(domain, "os")
    ET.SubElement(os_element, "type", arch="x86_64").text = "hvm"
    found = ET.SubElement(ET.SubElement(domain, "metadata"), f"{{{METADATA_NS}}}labels")
    for key, value in labels.items():
        ET.SubElement(found, f"{{{METADATA_NS}}}label", {"key": key, "value": value})
    return ET.tostring(domain, encoding="unicode")


def test_malformed_domain_metadata_is_skipped_with_a_warning(vm_provider: VmProvider) -> None:
    good = {L.ROLE: "guest", L.CREATED_AT: "1", L.EXPIRES_AT: "2", L.SCREEN: "800x600"}
    bad_labels = [
        {**good, L.SANDBOX: "vm-.bad"},
        {**good, L.SANDBOX: f"vm-{secrets.token_hex(5)}", L.EXPIRES_AT: "soon"},
        {**good, L.SANDBOX: f"vm-{secrets.token_hex(5)}", L.CREATED_AT: "x"},
    ]
    names = [f"cubicle-test-malformed-{secrets.token_hex(4)}" for _ in bad_labels]
    domains = [
        vm_provider.conn.defineXML(_bad_domain_xml(name, labels))  # defined, never started
        for name, labels in zip(names, bad_labels, strict=True)
    ]
    try:
        collected = _gc()
        listed = _cli("ls")
        assert listed.returncode == 0, listed.stderr
        for name in names:
            vm_provider.conn.lookupByName(name)  # still there: skipped, not removed
            assert name in collected.stderr
        assert "vm-.bad" in collected.stderr and "'soon'" in collected.stderr
        assert names[2] in listed.stderr and "'x'" in listed.stderr
    finally:
        for domain in domains:
            domain.undefine()


def test_teardown_after_a_concurrent_gc_removed_the_rules_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two collectors (two ``gc``, or ``gc`` and ``down``) list the same firewall rules; the first
    deletes them; the second's ``-D`` then finds nothing, which is success, not exit 1."""
    sandbox_id = f"vm-{secrets.token_hex(5)}"
    rule = ["INPUT", "-i", f"cbvm-{sandbox_id[3:]}", "-m", "comment"]
    rule += ["--comment", f"cubicle-{sandbox_id}", "-j", "DROP"]
    added = subprocess.run(["iptables", "-w", "-A", *rule], capture_output=True, check=False)
    if added.returncode != 0:
        pytest.skip(f"iptables cannot add a rule here: {added.stderr!r}")
    tagged = vm_network._tagged_rules
    try:
        listed = [found for found in tagged() if found[1] == sandbox_id]
        assert listed == [("iptables", sandbox_id, "filter", rule)]
        subprocess.run(["iptables", "-w", "-D", *rule], check=True)  # the other collector
        monkeypatch.setattr(vm_network, "_tagged_rules", lambda: iter(listed))  # its old list
        vm_network._remove_rules({sandbox_id})  # does not raise
    finally:
        subprocess.run(["iptables", "-w", "-D", *rule], capture_output=True, check=False)
    assert [found for found in tagged() if found[1] == sandbox_id] == []
