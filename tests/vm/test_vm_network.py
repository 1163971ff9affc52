"""``allow:`` on the VM backend, proven from inside a real guest: the guest has no network card,
its only way out is the host egress proxy on a virtio-serial channel, which forwards exactly the
allowed origins and logs every decision; no bridge, libvirt network or firewall rule is made at any
time; destroy and gc (after the creator is SIGKILLed) leave no proxy process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cubicle.egress.proxy import EGRESS_PORT
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.origin_questions import OriginQuestions
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import network as vm_network
from cubicle.orchestrator.sandbox import wait_ready
from tests.orchestrator.support import http_server
from tests.support.guest_probes import DIRECT_PROBE, PROXY_PROBE
from tests.support.listener import host_addresses
from tests.vm.conftest import REPO, assert_gone, qemu_pids_using

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def _run(provider: VmProvider, sandbox_id: str, code: str, *args: str) -> dict[str, Any]:
    done = provider.exec(sandbox_id, ["python3", "-c", code, *args], timeout=90)
    assert done.exit_code == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _network_leftovers(provider: VmProvider, sandbox_id: str) -> list[str]:
    return [
        kind
        for kind, ids in vm_network.leftovers(provider.conn, provider.home).items()
        if sandbox_id in ids
    ]


INTERFACES_PROBE = """
import json, os
print(json.dumps({"interfaces": sorted(os.listdir("/sys/class/net"))}))
"""


def _host_network_lines() -> set[str]:
    """The host's firewall rules (iptables-save, ip6tables-save) and network links, one per
    line."""
    lines = set()
    for argv in (["iptables-save"], ["ip6tables-save"], ["ip", "-o", "link"]):
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        for line in done.stdout.splitlines():
            if not line.startswith("#"):  # iptables-save's dated comments
                lines.add(line.split("@")[0] if argv[0] == "ip" else line)
    return lines


def _ours(lines: set[str], sandbox_id: str) -> list[str]:
    """Lines that name the sandbox (its id, its would-be bridge ``cbvm-…``)."""
    tags = (sandbox_id, sandbox_id.removeprefix("vm-"), vm_network.bridge_name(sandbox_id))
    return sorted(line for line in lines if any(tag in line for tag in tags))


def test_allow_forwards_exactly_the_allowed_origins(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    before = _host_network_lines()
    with http_server("allowed") as allowed, http_server("other") as other:
        p = allowed.port
        policy = NetworkPolicy.parse(f"allow:localhost:{p},127.0.0.1:{p},allowed.test")
        info = vm_provider.create(SandboxSpec(network=policy))
        leak_check.append(info.id)
        try:
            assert info.detail["start"] == "cold"  # warm states have no egress port
            assert _network_leftovers(vm_provider, info.id) == ["proxy"]  # no network, no rule
            domain_xml = vm_provider.conn.lookupByName(f"cubicle-{info.id}").XMLDesc(0)
            wait_ready(vm_provider, info.id, timeout=240)
            interfaces = _run(vm_provider, info.id, INTERFACES_PROBE)
            hosts = [*host_addresses(), "10.0.2.2", "169.254.169.254", "192.168.122.1"]
            direct = _run(
                vm_provider,
                info.id,
                DIRECT_PROBE,
                *(f"{host}:{port}" for host in hosts for port in (p, other.port, EGRESS_PORT)),
                f"127.0.0.1:{p}",  # the guest's own loopback, not the host's
                f"::1:{p}",
                f"fe80::1:{p}",
                f"GATEWAY:{p}",
            )
            urls = {
                "allowed": f"http://localhost:{p}/ok",
                "allowed address": f"http://127.0.0.1:{p}/ip",
                "other port": f"http://localhost:{other.port}/no",
                "other port by address": f"http://127.0.0.1:{other.port}/no",
                "suffix": f"http://localhost.evil.test:{p}/no",
                "path": f"http://evil.test/localhost:{p}/no",
                "default port": "http://localhost/no",
                "name suffix": "http://allowed.test.evil.test/no",
                "name path": "http://evil.test/allowed.test",
                "allowed name": "http://allowed.test/",
                "https tunnel to other port": f"https://localhost:{other.port}/no",
            }
            seen = _run(vm_provider, info.id, PROXY_PROBE, *urls.values())
            during = _host_network_lines()
            logs = subprocess.run(
                [sys.executable, "-m", "cubicle.orchestrator.cli", "logs", info.id],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            log = vm_provider.egress_log(info.id)
            run = vm_provider.home / "run" / info.id
            open_to_others = [p.name for p in [run, *run.iterdir()] if p.lstat().st_mode & 0o007]
        finally:
            vm_provider.destroy(info.id)
    after = _host_network_lines()
    # no bridge, no libvirt network, no firewall rule, no NIC: at no time
    assert "<interface" not in domain_xml
    assert f"mode='connect' path='{run / vm_network.CHANNEL_SOCKET}'" in domain_xml
    assert interfaces == {"interfaces": ["lo"]}
    assert _ours(during - before, info.id) == [] and _ours(after, info.id) == []
    proxy_url = f"http://127.0.0.1:{EGRESS_PORT}"  # the guest's relay, on its own loopback
    assert seen["env"] == {"http": proxy_url, "https": proxy_url}
    assert seen["no_proxy"] == ["localhost,127.0.0.1,::1"] * 2
    assert str(direct.pop("dns")).startswith("gaierror"), direct
    assert direct.pop("gateway") is None
    # the relay listens on the guest's own loopback (its only listener there): the rest is refused
    relay = direct.pop(f"127.0.0.1:{p}")
    assert relay != "connected", relay
    for target, outcome in direct.items():
        assert outcome != "connected", (target, direct)
    # through the proxy: exactly the allowed origins
    assert seen[urls["allowed"]] == [200, "allowed"], seen
    assert seen[urls["allowed address"]] == [200, "allowed"], seen
    for name in ("other port", "other port by address", "suffix", "path", "default port"):
        assert seen[urls[name]][0] == 403, (name, seen)
    for name in ("name suffix", "name path"):
        assert seen[urls[name]][0] == 403, (name, seen)
    assert seen[urls["allowed name"]][0] == 502, seen  # allowed, but it resolves nowhere here
    assert "403" in str(seen[urls["https tunnel to other port"]][1]), seen
    assert open_to_others == [], "other users may use these files (proxy log, its channel …)"
    assert sorted(allowed.paths) == ["/ip", "/ok"]
    assert other.paths == []
    decisions = [json.loads(line) for line in log.splitlines() if '"decision"' in line]
    allowed_entries = {(d["host"], d["port"]) for d in decisions if d["decision"] == "allow"}
    refused_entries = {(d["host"], d["port"]) for d in decisions if d["decision"] == "refuse"}
    assert allowed_entries == {("localhost", p), ("127.0.0.1", p), ("allowed.test", 80)}
    assert refused_entries >= {
        ("localhost", other.port),
        ("127.0.0.1", other.port),
        ("localhost.evil.test", p),
        ("evil.test", 80),
        ("localhost", 80),
        ("allowed.test.evil.test", 80),
    }
    assert logs.returncode == 0, logs.stderr
    assert "--- egress proxy ---" in logs.stdout
    assert '"decision": "refuse", "method": "GET", "host": "allowed.test.evil.test"' in logs.stdout
    assert_gone(vm_provider, info.id)
    assert _network_leftovers(vm_provider, info.id) == []


CREATOR = """
import sys, time
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.origin_questions import OriginQuestions
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.provider import SandboxSpec
spec = SandboxSpec(ttl_s=3600, network=NetworkPolicy.parse("allow:example.com"))
info = VmProvider().create(spec)
print(info.id, flush=True)
time.sleep(3600)
"""


def test_sigkill_of_an_allow_creator_then_gc_leaves_no_network_rule_or_proxy(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    creator = subprocess.Popen(
        [sys.executable, "-c", CREATOR], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert creator.stdout is not None
        sandbox_id = creator.stdout.readline().strip()
        assert sandbox_id.startswith("vm-"), "the creator did not print a sandbox id"
        leak_check.append(sandbox_id)
        assert qemu_pids_using(vm_provider.home / "run" / sandbox_id), "QEMU is not running"
    finally:
        os.kill(creator.pid, signal.SIGKILL)
        creator.wait(timeout=30)
        if creator.stdout is not None:
            creator.stdout.close()
    # everything outlives the creator until gc (the proxy: no network, no rule was ever made)
    assert _network_leftovers(vm_provider, sandbox_id) == ["proxy"]
    removed = vm_provider.gc()
    assert sandbox_id in removed
    assert_gone(vm_provider, sandbox_id)
    assert _network_leftovers(vm_provider, sandbox_id) == []


def test_gc_removes_network_pieces_whose_run_directory_is_gone(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """A creator killed between starting the proxy and starting the domain, whose run
    directory was then removed, leaves a proxy that only gc's scan by id can find."""
    sandbox_id = "vm-0deadbeef0"
    leak_check.append(sandbox_id)
    run = vm_provider.home / "run" / sandbox_id
    run.mkdir(parents=True)
    try:
        vm_network.setup_channel(
            sandbox_id,
            NetworkPolicy.parse("allow:example.com"),
            run,
            proxy_home=vm_provider.home,
            files=vm_provider.files,
        )
        assert _network_leftovers(vm_provider, sandbox_id) == ["proxy"]
    finally:
        for name in os.listdir(run):
            (run / name).unlink()
        run.rmdir()
    assert sandbox_id in vm_provider.gc()
    assert _network_leftovers(vm_provider, sandbox_id) == []


def test_ask_mode_holds_the_guest_until_a_person_answers(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """``ask:`` on a VM: the host proxy (as nobody) holds the guest's request; the question comes
    over the root-only control socket; approve lets it through, deny refuses a tunnel."""
    host = next(iter(host_addresses()))  # an approved destination may not be a loopback one
    with http_server("approved", host) as approved, http_server("denied", host) as denied:
        # the host's address is private: the operator names it as internal, or approving it
        # could never connect (the proxy's address guard), and nobody would be asked
        network = NetworkPolicy.parse("ask:", ask_timeout=60).with_internal([f"{host}/32"])
        info = vm_provider.create(SandboxSpec(network=network))
        leak_check.append(info.id)
        try:
            wait_ready(vm_provider, info.id, timeout=240)
            control = vm_provider.home / "run" / info.id / vm_network.CONTROL_SOCKET
            mode = control.lstat()
            with (
                ThreadPoolExecutor(2) as pool,
                OriginQuestions(
                    vm_provider.open_egress_control(info.id, timeout=10), info.id
                ) as questions,
            ):
                held = pool.submit(
                    _run, vm_provider, info.id, PROXY_PROBE, f"http://{host}:{approved.port}/yes"
                )
                asked = questions.next(120)
                assert asked is not None and asked.origin == f"http://{host}:{approved.port}"
                assert approved.paths == []  # held
                questions.answer(asked.id, "approve", by="vm tester")
                got = held.result(120)
                tunnel = pool.submit(
                    _run, vm_provider, info.id, PROXY_PROBE, f"https://{host}:{denied.port}/no"
                )
                asked = questions.next(120)
                assert asked is not None and asked.origin == f"https://{host}:{denied.port}"
                questions.answer(asked.id, "deny", by="vm tester")
                refused = tunnel.result(120)
            log = vm_provider.egress_log(info.id)
        finally:
            vm_provider.destroy(info.id)
    assert got[f"http://{host}:{approved.port}/yes"] == [200, "approved"], got
    assert "403" in str(refused[f"https://{host}:{denied.port}/no"][1]), refused
    assert approved.paths == ["/yes"] and denied.paths == []
    assert (mode.st_uid, mode.st_mode & 0o777) == (0, 0o600)
    answers = [json.loads(x) for x in log.splitlines() if '"event": "answer"' in x]
    assert [(a["answer"], a["by"]) for a in answers] == [
        ("approve", "vm tester"),
        ("deny", "vm tester"),
    ]
