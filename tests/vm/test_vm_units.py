"""Pure parts of the VM backend: domain XML, labels in <metadata>, restore retargeting, the
accelerator probe, warm-slot validity, input refusals and finding/ending a domain's QEMU by
pid (no libvirt needed)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ConfigError, ImageMissing
from cubicle.orchestrator.labels import SANDBOX
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm.domain import (
    AGENT_PORT,
    EGRESS_CHANNEL,
    VIEW_CHANNEL,
    VIEW_SOCKET,
    Accelerator,
    DomainPlan,
    domain_xml,
    labels_from_xml,
    probe_accelerator,
    retarget_saved_xml,
)
from cubicle.orchestrator.providers.vm.files import FileAccess
from cubicle.orchestrator.providers.vm.image import VmImage, image_ref, load_image
from cubicle.orchestrator.providers.vm.network import (
    EgressChannel,
    VmNetwork,
    bridge_name,
    network_name,
)
from cubicle.orchestrator.providers.vm.qemu_process import end_qemu, find_qemu
from cubicle.orchestrator.providers.vm.virt import SANDBOX_STATES, DomainState
from cubicle.orchestrator.providers.vm.warm import WarmKey, slots_for


def _plan(tmp_path: Path, **changes: object) -> DomainPlan:
    values: dict[str, object] = {
        "name": "cubicle-vm-0123456789",
        "kernel": tmp_path / "vmlinux",
        "initrd": tmp_path / "initrd.img",
        "overlay": tmp_path / "overlay.qcow2",
        "agent_socket": tmp_path / "agent.sock",
        "console_log": tmp_path / "console.log",
        "memory_mb": 1024,
        "vcpus": 2,
        "screen": (1024, 768),
        "accelerator": Accelerator("tcg", "test"),
        "labels": {SANDBOX: "vm-0123456789"},
        "arch": "x86_64",
    }
    values.update(changes)
    return DomainPlan(**values)  # type: ignore[arg-type]


def test_domain_xml_has_no_nic_by_default_and_carries_the_labels(tmp_path: Path) -> None:
    xml = domain_xml(_plan(tmp_path))
    root = ET.fromstring(xml)
    assert root.get("type") == "qemu"
    assert root.find("devices/interface") is None
    channel = root.find("devices/channel")
    assert channel is not None
    assert channel.find("target").get("name") == AGENT_PORT  # type: ignore[union-attr]
    assert "cubicle.screen=1024x768" in root.findtext("os/cmdline", "")
    assert labels_from_xml(xml) == {SANDBOX: "vm-0123456789"}


def test_a_domain_boots_with_more_vcpus_than_the_guest_keeps(tmp_path: Path) -> None:
    """The domain has ``boot_vcpus``; the guest is told (cubicle.cpus=) how many to keep online
    after the boot — only when it boots with more."""
    for vcpus, boot, domain_vcpus, told in ((1, 2, "2", "1"), (2, 2, "2", None), (3, 2, "3", None)):
        plan = _plan(tmp_path, vcpus=vcpus, boot_vcpus=boot)
        root = ET.fromstring(domain_xml(plan))
        assert root.findtext("vcpu") == domain_vcpus
        cmdline = root.findtext("os/cmdline", "").split()
        kept = [word.split("=", 1)[1] for word in cmdline if word.startswith("cubicle.cpus=")]
        assert kept == ([told] if told else []), (vcpus, boot, cmdline)
        assert plan.kept_vcpus == (int(told) if told else None)  # what a golden waits for
        # cores of one socket: the second vCPU's delay loop is its sibling's, not timed again
        topology = root.find("cpu/topology")
        assert topology is not None and dict(topology.attrib) == {
            "sockets": "1",
            "dies": "1",
            "cores": domain_vcpus,
            "threads": "1",
        }


def test_x86_guests_route_pci_interrupts_without_acpi(tmp_path: Path) -> None:
    """The BIOS's routing table, not ACPI's link devices (their AML ran at every virtio probe);
    an aarch64 guest has no such table and keeps ACPI's."""
    x86 = ET.fromstring(domain_xml(_plan(tmp_path, arch="x86_64")))
    assert "acpi=noirq" in x86.findtext("os/cmdline", "").split()
    arm = ET.fromstring(domain_xml(_plan(tmp_path, arch="aarch64")))
    assert "acpi=noirq" not in arm.findtext("os/cmdline", "").split()


def test_kvm_uses_the_host_cpu_and_no_plan_has_a_user_mode_nic(tmp_path: Path) -> None:
    root = ET.fromstring(domain_xml(_plan(tmp_path, accelerator=Accelerator("kvm", "test"))))
    assert root.get("type") == "kvm"
    assert root.find("cpu").get("mode") == "host-passthrough"  # type: ignore[union-attr]
    # QEMU user networking shows the host's loopback at 10.0.2.2: no plan uses it any more
    assert root.findall("devices/interface") == []


def test_hvf_plan_targets_aarch64_virt(tmp_path: Path) -> None:
    root = ET.fromstring(
        domain_xml(_plan(tmp_path, arch="aarch64", accelerator=Accelerator("hvf", "test")))
    )
    assert root.get("type") == "hvf"
    os_type = root.find("os/type")
    assert os_type is not None and (os_type.get("arch"), os_type.get("machine")) == (
        "aarch64",
        "virt",
    )
    assert "console=ttyAMA0" in root.findtext("os/cmdline", "")


def test_retarget_changes_only_host_paths_and_labels(tmp_path: Path) -> None:
    saved = domain_xml(_plan(tmp_path))
    new = tmp_path / "new"
    xml = retarget_saved_xml(
        saved,
        overlay=new / "o.qcow2",
        agent_socket=new / "a.sock",
        console_log=new / "c.log",
        labels={SANDBOX: "vm-abcdefabcd"},
    )
    root = ET.fromstring(xml)
    assert root.findtext("name") == "cubicle-vm-0123456789"
    assert root.find("devices/disk/source").get("file") == str(new / "o.qcow2")  # type: ignore[union-attr]
    assert root.find("devices/channel/source").get("path") == str(new / "a.sock")  # type: ignore[union-attr]
    sockets = {
        element.find("target").get("name"): element.find("source").get("path")  # type: ignore[union-attr]
        for element in root.findall("devices/channel")
    }
    assert sockets == {AGENT_PORT: str(new / "a.sock"), VIEW_CHANNEL: str(new / VIEW_SOCKET)}
    assert labels_from_xml(xml) == {SANDBOX: "vm-abcdefabcd"}


def test_accelerator_override_and_probe_reason() -> None:
    assert probe_accelerator({"CUBICLE_VM_ACCEL": "tcg"}).kind == "tcg"
    probed = probe_accelerator({})
    assert probed.kind in ("kvm", "tcg", "hvf") and probed.reason
    if not Path("/sys/module/kvm_intel").exists() and not Path("/sys/module/kvm_amd").exists():
        assert probed.kind == "tcg"


def test_warm_slot_is_stale_for_another_build(tmp_path: Path) -> None:
    image = VmImage(
        "abcd" * 4, tmp_path, tmp_path / "b", tmp_path / "k", tmp_path / "i", {"built_at": 1.0}
    )
    slot = slots_for(tmp_path, image, WarmKey((1280, 800), 2048, 2, 1024, "tcg"), 2)[0]
    slot.directory.mkdir(parents=True)
    slot.golden.write_bytes(b"")
    slot.state.write_bytes(b"")
    slot.commit(image, WarmKey((1280, 800), 2048, 2, 1024, "tcg"), "uuid", FileAccess(None))
    assert slot.valid_for(image)
    for path, mode in ((slot.golden, 0o400), (slot.state, 0o400), (slot.meta_path, 0o600)):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    rebuilt = VmImage(
        image.ref, tmp_path, tmp_path / "b", tmp_path / "k", tmp_path / "i", {"built_at": 2.0}
    )
    assert not slot.valid_for(rebuilt)
    assert json.loads(slot.meta_path.read_text())["image_ref"] == image.ref


def test_image_ref_is_stable_and_missing_image_names_the_fix(tmp_path: Path) -> None:
    assert image_ref() == image_ref()
    with pytest.raises(ImageMissing) as caught:
        load_image("0" * 16, tmp_path)
    assert caught.value.hint and "image build --backend vm" in caught.value.hint


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (SandboxSpec(screen=(10, 800)), "screen 10x800"),
        (SandboxSpec(memory_mb=64), "memory_mb=64"),
    ],
)
def test_bad_specs_are_refused_before_anything_is_created(
    tmp_path: Path, spec: SandboxSpec, words: str
) -> None:
    provider = VmProvider(home=tmp_path, uri="test:///default")
    with pytest.raises(ConfigError, match=words):
        provider.create(spec)
    assert not (tmp_path / "run").exists()


def test_proxied_networks_give_the_domain_no_nic_but_a_channel_to_the_proxy(
    tmp_path: Path,
) -> None:
    """allow:/block:/ask: need no network card: the egress proxy is a second virtio-serial port
    whose host side QEMU connects to; the guest is told to start its relay."""
    channel = EgressChannel("vm-0123456789", tmp_path / "egress-channel.sock")
    root = ET.fromstring(
        domain_xml(_plan(tmp_path, egress_channel=channel.socket, extra_cmdline=channel.cmdline()))
    )
    assert root.findall("devices/interface") == []
    channels = [
        (t.get("name"), s.get("mode"), s.get("path"))
        for element in root.findall("devices/channel")
        if (t := element.find("target")) is not None and (s := element.find("source")) is not None
    ]
    assert channels == [
        (AGENT_PORT, "bind", str(tmp_path / "agent.sock")),
        (VIEW_CHANNEL, "bind", str(tmp_path / VIEW_SOCKET)),
        (EGRESS_CHANNEL, "connect", str(tmp_path / "egress-channel.sock")),
    ]
    words = (root.findtext("os/cmdline") or "").split()
    assert "cubicle.egress=3128" in words
    assert not any(w.startswith(("cubicle.net=", "cubicle.proxy=")) for w in words)
    assert channel.proxy_url == "http://127.0.0.1:3128"
    assert bridge_name("vm-0123456789") == "cbvm-0123456789"  # Linux allows 15 characters


def _vm_network(sandbox_id: str, subnet: str) -> VmNetwork:
    return VmNetwork(
        sandbox_id,
        network_name(sandbox_id),
        bridge_name(sandbox_id),
        ipaddress.IPv4Network(subnet),
    )


def test_open_network_routes_and_resolves_through_the_host_side_of_its_bridge() -> None:
    network = _vm_network("vm-0123456789", "10.231.9.0/24")
    assert network.cmdline() == ("cubicle.net=10.231.9.2/24,10.231.9.1,10.231.9.1",)


def test_file_access_keeps_others_out(tmp_path: Path) -> None:
    """Directories 0750 and files of the given mode, in the QEMU group; owner-only without one."""
    group = FileAccess(os.getgid())
    made = group.directories(tmp_path, tmp_path / "warm" / "ref" / "slot0")
    group.write_text(made / "meta.json", "{}", 0o640)
    for path in (tmp_path / "warm", tmp_path / "warm" / "ref", made):
        assert stat.S_IMODE(path.stat().st_mode) == 0o750, path
        assert path.stat().st_gid == os.getgid()
    assert stat.S_IMODE((made / "meta.json").stat().st_mode) == 0o640
    alone = FileAccess(None)
    alone.write_text(tmp_path / "labels.json", "{}", 0o640)
    assert stat.S_IMODE((tmp_path / "labels.json").stat().st_mode) == 0o600


def test_allow_policy_passes_validation(tmp_path: Path) -> None:
    provider = VmProvider(home=tmp_path, uri="test:///default")
    provider.validate(SandboxSpec(network=NetworkPolicy.parse("allow:example.com")))


def test_domain_states_are_libvirts() -> None:
    libvirt = pytest.importorskip("libvirt")
    for state in DomainState:
        assert getattr(libvirt, f"VIR_DOMAIN_{state.name}") == state.value
    assert SANDBOX_STATES[DomainState.SHUTOFF] == "exited"


def _fake_qemu(domain: str, run: Path) -> subprocess.Popen[bytes]:
    """A process whose command line looks like a sandbox's QEMU (program name, ``guest=NAME``,
    the overlay in ``run``); it only sleeps."""
    return subprocess.Popen(
        [
            "/usr/bin/qemu-system-x86_64",
            "-c",
            "import time; time.sleep(600)",
            "-name",
            f"guest={domain},debug-threads=on",
            f"{run}/overlay.qcow2",
        ],
        executable=sys.executable,
        stdin=subprocess.DEVNULL,
    )


def test_qemu_is_found_by_domain_and_run_folder_and_ended_by_pid(tmp_path: Path) -> None:
    run, other_run = tmp_path / "vm-0123456789", tmp_path / "vm-01234567890"
    ours = _fake_qemu("cubicle-vm-0123456789", run)
    neighbour = _fake_qemu("cubicle-vm-0123456789", other_run)  # same name, another folder
    reaper = threading.Thread(target=ours.wait)  # we are its parent: reap it as it dies
    reaper.start()
    try:
        deadline = time.monotonic() + 30
        while find_qemu("cubicle-vm-0123456789", run) is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the exec of the fake is not instant
        assert find_qemu("cubicle-vm-0123456789", run) == ours.pid
        assert find_qemu("cubicle-vm-9999999999", run) is None
        # a pid that is not that QEMU (here: the neighbour) is never signalled
        assert end_qemu(neighbour.pid, "cubicle-vm-0123456789", run) is False
        assert neighbour.poll() is None
        assert end_qemu(ours.pid, "cubicle-vm-0123456789", run) is True
        assert not Path(f"/proc/{ours.pid}").exists()
        reaper.join(5)  # waitpid returned; Popen stores the status just after it
        assert ours.returncode == -signal.SIGKILL
        assert find_qemu("cubicle-vm-0123456789", run) is None
        assert end_qemu(ours.pid, "cubicle-vm-0123456789", run) is True  # gone: nothing to do
    finally:
        for process in (ours, neighbour):
            process.kill()
        reaper.join()
        neighbour.wait()
