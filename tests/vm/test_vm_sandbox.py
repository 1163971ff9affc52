"""End-to-end tests of the VM backend on real libvirt/QEMU (TCG here): the sandbox life cycle,
warm vs cold starts, network isolation seen from inside the guest, and clean-up after a
failed start and after the creating process is SIGKILLed."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from cubicle.orchestrator.errors import ProviderError, SandboxStartError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import image as vm_image
from cubicle.orchestrator.providers.vm import warm_start as vm_warm_start
from cubicle.orchestrator.providers.vm.warm import slots_for
from cubicle.orchestrator.sandbox import Sandbox, wait_ready
from cubicle_guest.errors import CubicleError
from cubicle_guest.waiting import Deadline, poll
from tests.desktop.checks import assert_fonts_are_never_rescanned, guest_pids
from tests.support.guest_probes import DIRECT_PROBE
from tests.support.listener import Listener, host_addresses
from tests.vm.conftest import REPO, assert_gone, qemu_pids_using

pytestmark = [pytest.mark.vm, pytest.mark.slow]


PORT_AND_X_MODES = """
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name")" = org.cubicle.agent ] && stat -c '%a %U' "/dev/${p##*/}"
done
stat -c '%a %U' /tmp/.X11-unix
"""


def test_up_screenshot_exec_down_through_sandbox(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    with Sandbox.create("vm", screen=(1280, 800), ready_timeout_s=180) as sandbox:
        leak_check.append(sandbox.id)
        assert sandbox.info.detail["accelerator"] == vm_provider.accelerator.kind
        deadline = time.monotonic() + 60
        while True:  # the first frame can precede the root window's paint (lab pitfall 5)
            result, png = sandbox.screenshot()
            with Image.open(io.BytesIO(png)) as image:
                size, colors = image.size, image.getcolors(1)
            if colors is None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert size == (1280, 800)
        assert result["native"] == {"width": 1280, "height": 800}
        assert colors is None, "the desktop screenshot is a single colour (black)"
        done = sandbox.exec(["id", "-un"])
        assert (done.exit_code, done.stdout.strip()) == (0, "cubicle")
        # the agent's port is the user's alone; X's socket folder root's, 1777, as X expects
        modes = sandbox.exec(["sh", "-c", PORT_AND_X_MODES])
        assert modes.stdout.split("\n")[:2] == ["600 cubicle", "1777 root"], modes
        missing = sandbox.exec(["false"])
        assert missing.exit_code == 1
        # the disk's copy of the image keeps the font folders' mtimes the caches record
        assert_fonts_are_never_rescanned(sandbox)
    assert_gone(vm_provider, sandbox.id)


def _ready_seconds(
    provider: VmProvider, spec: SandboxSpec, created: list[str]
) -> tuple[float, str, tuple[int, str]]:
    """Seconds from create to a painted desktop, the start kind, and (the domain's vCPUs, the
    guest's online CPUs once the boot's work is done)."""
    started = time.monotonic()
    info = provider.create(spec)
    created.append(info.id)
    try:
        wait_ready(provider, info.id, timeout=240, painted=True)
        seconds = time.monotonic() - started
        domain = provider.conn.lookupByName(info.detail["domain"])
        online = ""
        # a cold guest's init takes the boot's extra vCPUs offline as its agent starts serving;
        # a warm one was saved with them offline: its first look must show them so
        for _ in poll(Deadline(30 if info.detail["start"] == "cold" else 0), 0.2):
            online = provider.exec(info.id, ["cat", "/sys/devices/system/cpu/online"]).stdout
            if online.strip() == "0":
                break
        return seconds, info.detail["start"], (domain.maxVcpus(), online.strip())
    finally:
        provider.destroy(info.id)


def test_warm_start_answers_in_a_fraction_of_a_cold_boot(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """Also: a sandbox of one CPU boots with two vCPUs where the host has two CPUs (the boot's
    parallel parts run at once), and runs with one once its desktop is up, cold or warm."""
    spec = SandboxSpec(cpus=1)
    vm_provider.warm_up(spec, slots=1)
    cold_s, cold_kind, cold_cpus = _ready_seconds(VmProvider(warm_slots=0), spec, leak_check)
    warm_s, warm_kind, warm_cpus = _ready_seconds(vm_provider, spec, leak_check)
    print(
        f"cold boot to painted desktop {cold_s:.1f} s, warm restore {warm_s:.1f} s "
        f"({vm_provider.accelerator.kind})"
    )
    assert (cold_kind, warm_kind) == ("cold", "warm:0")
    boot_vcpus = min(2, os.cpu_count() or 1)
    assert cold_cpus == warm_cpus == (boot_vcpus, "0"), (cold_cpus, warm_cpus)
    assert warm_s < cold_s / 3, f"warm {warm_s:.1f} s is not under a third of cold {cold_s:.1f} s"


def _genid(xml: str) -> str | None:
    return ET.fromstring(xml).findtext("genid")


def test_warm_sandbox_clock_follows_the_host(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """A restored guest resumes with the saved guest's clock; the guest's init resets it from the
    RTC. The saved state is made at least 20 s old first, so a stale clock would show. The
    restored domain also carries a new VM generation ID (the guest reseeds its RNG)."""
    spec = SandboxSpec()
    vm_provider.warm_up(spec, slots=1)
    image = vm_image.load_image(vm_provider.image, vm_provider.home)
    slot = slots_for(vm_provider.home, image, vm_provider.warm_key(spec), 1)[0]
    meta = slot.meta()
    assert meta is not None
    time.sleep(max(0.0, 20 - (time.time() - meta["saved_at"])))
    info = vm_provider.create(spec)
    leak_check.append(info.id)
    try:
        assert info.detail["start"] == "warm:0"
        # a new VM generation ID makes the guest kernel reseed its RNG (not shared with the golden)
        saved_xml = vm_provider.conn.saveImageGetXMLDesc(str(slot.state), 0)
        live = vm_provider.describe(info.id)
        assert live is not None
        live_xml = vm_provider.conn.lookupByName(live.detail["domain"]).XMLDesc(0)
        assert _genid(live_xml) and _genid(live_xml) != _genid(saved_xml)
        wait_ready(vm_provider, info.id, timeout=120)
        deadline = time.monotonic() + 10
        while True:
            done = vm_provider.exec(info.id, ["python3", "-c", "import time; print(time.time())"])
            skew = abs(float(done.stdout) - time.time())
            if skew < 5 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert skew < 5, f"guest clock is {skew:.0f} s off the host's after a warm start"
    finally:
        vm_provider.destroy(info.id)


def _probe(provider: VmProvider, network: str, target: str, created: list[str]) -> dict[str, Any]:
    info = provider.create(SandboxSpec(network=NetworkPolicy.parse(network)))
    created.append(info.id)
    try:
        wait_ready(provider, info.id, timeout=240)
        done = provider.exec(info.id, ["python3", "-c", DIRECT_PROBE, target])
        assert done.exit_code == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        interfaces = provider.exec(info.id, ["ls", "/sys/class/net"])
        result["interfaces"] = sorted(interfaces.stdout.split())
        result["connect"] = result.pop(target)
        return result
    finally:
        provider.destroy(info.id)


def test_network_none_is_proven_from_inside_the_guest(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    listener = Listener("0.0.0.0")
    try:
        host = host_addresses()[0]
        isolated = _probe(vm_provider, "none", f"{host}:{listener.port}", leak_check)
        assert isolated["interfaces"] == ["lo"]
        assert isolated["connect"].startswith("OSError"), isolated  # Network is unreachable
        assert listener.accepted == 0
        # control: the same probe with a NIC reaches the listener (through the host side of the
        # open sandbox's network, its default gateway), so the probe can tell
        opened = _probe(vm_provider, "open", f"GATEWAY:{listener.port}", leak_check)
        assert "eth0" in opened["interfaces"] and opened["connect"] == "connected", opened
        assert listener.accepted == 1
    finally:
        listener.close()


def test_failed_start_leaves_nothing(
    vm_provider: VmProvider, leak_check: list[str], tmp_path: Path
) -> None:
    image = vm_image.load_image(vm_provider.image, vm_provider.home)
    broken = vm_provider.home / "images" / f"{image.ref}-broken-kernel"
    broken.mkdir(exist_ok=True)
    try:
        for name in ("base.qcow2", "initrd.img", "manifest.json"):
            target = broken / name
            if not target.exists():
                target.symlink_to(image.directory / name)
        (broken / "vmlinux").write_bytes(b"not a kernel")
        cold = VmProvider(warm_slots=0)
        before = set(os.listdir(cold.home / "run")) if (cold.home / "run").exists() else set()
        with pytest.raises(ProviderError, match="refused to start the domain of sandbox vm-"):
            cold.create(SandboxSpec(image=broken.name))
        after = set(os.listdir(cold.home / "run")) if (cold.home / "run").exists() else set()
        assert after - before == set(), "a per-sandbox directory was left behind"
    finally:
        for path in broken.iterdir():
            path.unlink()
        broken.rmdir()


def test_not_ready_in_time_through_sandbox_removes_everything(
    vm_provider: VmProvider, leak_check: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUBICLE_VM_WARM_SLOTS", "0")  # a cold boot takes far longer than 1 s
    with pytest.raises(SandboxStartError) as caught:
        Sandbox.create("vm", ready_timeout_s=1.0)
    leak_check.append(caught.value.sandbox_id)
    assert_gone(vm_provider, caught.value.sandbox_id)
    # 1 s into a cold boot the guest has printed nothing: the error says so and what the host
    # knows instead (the domain's state, the vCPU time it got, QEMU's own log), not an empty tail
    tail = caught.value.log_tail
    assert f"the console of {caught.value.sandbox_id} is empty" in tail, tail
    assert "s of vCPU time" in tail and "state 1, reason" in tail, tail  # 1: running
    assert f"QEMU's log /var/log/libvirt/qemu/cubicle-{caught.value.sandbox_id}.log:" in tail
    assert "-sandbox on" in tail, tail  # the end of the command line libvirt logged


CREATOR = """
import sys, time
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm.warm import slots_for
from cubicle.orchestrator.provider import SandboxSpec
info = VmProvider(warm_slots=int(sys.argv[1])).create(SandboxSpec(ttl_s=3600))
print(info.id, flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("warm_slots", [0, 1], ids=["cold", "warm"])
def test_sigkill_of_creator_then_gc_leaves_nothing(
    vm_provider: VmProvider, leak_check: list[str], warm_slots: int
) -> None:
    creator = subprocess.Popen(
        [sys.executable, "-c", CREATOR, str(warm_slots)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert creator.stdout is not None
        sandbox_id = creator.stdout.readline().strip()
        assert sandbox_id.startswith("vm-"), "the creator did not print a sandbox id"
        leak_check.append(sandbox_id)
        run = vm_provider.home / "run" / sandbox_id
        assert qemu_pids_using(run), "the sandbox's QEMU is not running"
    finally:
        os.kill(creator.pid, signal.SIGKILL)
        creator.wait(timeout=30)
        if creator.stdout is not None:
            creator.stdout.close()
    assert vm_provider.describe(sandbox_id) is not None, "the domain must outlive its creator"
    removed = vm_provider.gc()
    assert sandbox_id in removed
    assert_gone(vm_provider, sandbox_id)


def _painted_png(provider: VmProvider, sandbox_id: str) -> Image.Image:
    """The sandbox's first painted full-screen PNG (waits for the agent)."""
    wait_ready(provider, sandbox_id, timeout=240, painted=True)
    with provider.connect(sandbox_id, timeout=30) as client:
        client.hello(timeout=30)
        blob = client.screenshot(format="png").blob
    image = Image.open(io.BytesIO(blob))
    assert image.getcolors(1) is None, f"{sandbox_id}: the screen is one colour"
    return image


def test_every_sandbox_restores_warm_however_many_run_at_once(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """One saved state runs as one live domain (libvirt keeps its name and UUID): a second slot
    is a copy of the first, renamed (no boot: its golden disk is the first's, hard-linked), and
    a sandbox that finds every slot busy is restored from a copy of a slot's state made for it
    (domain ``cubicle-<id>``), which is removed once restored. Three run at once, each its own
    guest: its own disk, its own VM generation ID, the desktop drawn."""
    two_slots = VmProvider(warm_slots=2)
    two_slots.image = vm_provider.image
    spec = SandboxSpec()
    assert two_slots.warm_up(spec) == 2
    image = vm_image.load_image(vm_provider.image, vm_provider.home)
    first_slot, second_slot = slots_for(vm_provider.home, image, vm_provider.warm_key(spec), 2)
    assert first_slot.golden.stat().st_ino == second_slot.golden.stat().st_ino
    saved = ET.fromstring(vm_provider.conn.saveImageGetXMLDesc(str(second_slot.state), 0))
    assert saved.findtext("name") == second_slot.name
    meta = second_slot.meta()
    assert meta is not None and saved.findtext("uuid") == meta["uuid"]

    infos = []
    try:
        for _ in range(3):
            infos.append(two_slots.create(spec))
            leak_check.append(infos[-1].id)
        assert [info.detail["start"] for info in infos] == ["warm:0", "warm:1", "warm-copy:0"]
        assert infos[2].detail["domain"] == f"cubicle-{infos[2].id}"
        assert not (vm_provider.home / "run" / infos[2].id / "state.save").exists()
        genids = set()
        for info in infos:
            _painted_png(two_slots, info.id)
            genids.add(_genid(two_slots.conn.lookupByName(info.detail["domain"]).XMLDesc(0)))
            wrote = two_slots.exec(
                info.id, ["sh", "-c", 'echo "$1" > ~/who.txt', "sh", info.id], timeout=90
            )
            assert wrote.exit_code == 0, wrote.stderr
        assert len(genids) == 3
        for info in infos:
            done = two_slots.exec(info.id, ["sh", "-c", "hostname; cat ~/who.txt"], timeout=90)
            assert done.stdout.split() == ["cubicle", info.id]
    finally:
        for info in infos:
            two_slots.destroy(info.id)
    for info in infos:
        assert_gone(vm_provider, info.id)
    assert first_slot.valid_for(image) and second_slot.valid_for(image)


def test_a_sandbox_cold_boots_when_the_copy_of_a_busy_slot_fails(
    vm_provider: VmProvider, leak_check: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of a busy slot's state cannot be written (the disk is full, made so by failing
    the copy): the sandbox cold-boots instead, works, and no partial copy is left."""
    one_slot = VmProvider(warm_slots=1)
    one_slot.image = vm_provider.image
    holder = one_slot.create(SandboxSpec())
    leak_check.append(holder.id)
    try:

        def disk_full(source: Path, target: Path, **_: str) -> None:
            target.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

        monkeypatch.setattr(vm_warm_start, "clone_saved_state", disk_full)
        second = one_slot.create(SandboxSpec())
        leak_check.append(second.id)
        try:
            assert (holder.detail["start"], second.detail["start"]) == ("warm:0", "cold")
            assert not (vm_provider.home / "run" / second.id / "state.save").exists()
            _painted_png(one_slot, second.id)
        finally:
            one_slot.destroy(second.id)
    finally:
        one_slot.destroy(holder.id)


def test_the_vm_powers_off_when_its_desktop_is_gone(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """Xvfb killed: the desktop supervisor (images/desktop/supervisor.py) exits 1 and the guest's
    init powers the VM off, as a Docker sandbox's container stops (before the two backends shared
    the start-up, nothing watched Xvfb in a VM: it ran on without a desktop)."""
    with Sandbox.create("vm", ready_timeout_s=240) as sandbox:
        leak_check.append(sandbox.id)
        (xvfb,) = guest_pids(sandbox, "Xvfb")
        with contextlib.suppress(CubicleError):  # the agent may be stopped before it answers
            sandbox.exec(["sh", "-c", 'kill -KILL "$1"', "sh", str(xvfb)])
        for _ in poll(Deadline(60), 0.1):
            if vm_provider.describe(sandbox.id) is None:
                break
        else:
            raise AssertionError(f"the VM still runs without its desktop:\n{sandbox.logs(30)}")
        logs = sandbox.logs(60)
        assert "[supervisor] Xvfb exited with status -9; the desktop is gone" in logs, logs
        assert "the desktop supervisor exited with status 1; powering off" in logs, logs
