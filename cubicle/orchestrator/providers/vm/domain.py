"""libvirt domain XML for VM sandboxes, cubicle's labels in its ``<metadata>``, and the accelerator.

One :class:`DomainPlan` describes a sandbox domain: a transient domain that direct-boots the
image's PVH ``vmlinux`` + tiny initramfs from a per-sandbox qcow2 overlay, with a virtio-serial
unix channel to the agent and one to the live view (:data:`VIEW_CHANNEL`, a socket beside the
agent's), the serial console in a file, no NIC unless the network policy is
``open`` on a host with bridges (a NIC on the sandbox's own libvirt network,
:mod:`cubicle.orchestrator.providers.vm.network`), for ``allow:``/``block:``/``ask:`` (and ``open``
without bridges) a second virtio-serial channel whose host side is the egress proxy's socket
(QEMU connects), and the labels of
:mod:`cubicle.orchestrator.labels` (owner pid/start/host, expiry …) as
``<cubicle:label key=… value=…/>`` elements so ``gc`` finds orphans.

Accelerator (:func:`probe_accelerator`): KVM only when the host has real VT-x/AMD-V
(``kvm_intel``/``kvm_amd`` loaded and ``/dev/kvm`` usable); a PVM ``/dev/kvm`` (``kvm_pvm``, as on
Firecracker hosts) cannot run stock Debian kernels, so it falls back to TCG and says why. On
macOS the code path is HVF (domain type ``hvf``, machine ``virt``, aarch64 ``Image``, console
``ttyAMA0``) — written from the libvirt docs, not tested here.
"""

from __future__ import annotations

import os
import platform
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "AARCH64_MACHINES",
    "AGENT_PORT",
    "EGRESS_CHANNEL",
    "METADATA_NS",
    "VIEW_CHANNEL",
    "VIEW_SOCKET",
    "Accelerator",
    "DomainPlan",
    "domain_xml",
    "labels_from_xml",
    "probe_accelerator",
    "retarget_saved_xml",
]

AGENT_PORT = "org.cubicle.agent"
"""Name of the virtio-serial port the guest agent listens on (images/vm/cubicle-init)."""
EGRESS_CHANNEL = "org.cubicle.egress"
"""Name of the virtio-serial port to the egress proxy (``cubicle_guest.egress_relay``)."""
VIEW_CHANNEL = "org.cubicle.view"
"""Name of the virtio-serial port of the live view (``cubicle_guest.view_relay``): every domain
has it; its host side is a unix socket QEMU binds beside the agent's, :data:`VIEW_SOCKET`."""
VIEW_SOCKET = "view.sock"
"""File name of the view channel's host socket, in the agent socket's folder."""
METADATA_NS = "https://cubicle.invalid/xmlns/libvirt/1"
METADATA_PREFIX = "cubicle"

AARCH64_MACHINES = ("aarch64", "arm64")
"""The names :func:`platform.machine` gives 64-bit ARM (Linux says aarch64, macOS arm64)."""

AccelKind = Literal["kvm", "tcg", "hvf"]


@dataclass(frozen=True)
class Accelerator:
    """Which hypervisor acceleration a domain uses and why (shown by doctor and ``cubicle ls``)."""

    kind: AccelKind
    reason: str

    @property
    def domain_type(self) -> str:
        return {"kvm": "kvm", "tcg": "qemu", "hvf": "hvf"}[self.kind]


def probe_accelerator(env: Mapping[str, str] | None = None) -> Accelerator:
    """Pick KVM, HVF or TCG for this host. ``CUBICLE_VM_ACCEL=kvm|tcg|hvf`` overrides the probe."""
    forced = (env if env is not None else os.environ).get("CUBICLE_VM_ACCEL", "").strip().lower()
    if forced in ("kvm", "tcg", "hvf"):
        return Accelerator(forced, f"forced by CUBICLE_VM_ACCEL={forced}")  # type: ignore[arg-type]
    if sys.platform == "darwin":
        return Accelerator("hvf", "macOS: Hypervisor.framework (libvirt domain type hvf)")
    modules = Path("/sys/module")
    real = [m for m in ("kvm_intel", "kvm_amd") if (modules / m).exists()]
    if not Path("/dev/kvm").exists():
        return Accelerator(
            "tcg", "no /dev/kvm on this host: software emulation (TCG), several times slower"
        )
    if not real:
        if (modules / "kvm_pvm").exists():
            return Accelerator(
                "tcg",
                "/dev/kvm is PVM (kvm_pvm), which runs only PVM-enabled guest kernels, "
                "not Debian's: "
                "using TCG",
            )
        return Accelerator(
            "tcg", "/dev/kvm exists but neither kvm_intel nor kvm_amd is loaded: using TCG"
        )
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accelerator(
            "tcg", f"{real[0]} is loaded but /dev/kvm is not usable by this user: using TCG"
        )
    return Accelerator("kvm", f"{real[0]} is loaded and /dev/kvm is usable")


@dataclass(frozen=True)
class DomainPlan:
    """Everything one sandbox domain needs. Paths are absolute host paths.

    ``memory_mb`` in MiB; ``screen`` in pixels; ``labels`` come from
    :func:`cubicle.orchestrator.labels.create_labels`.
    """

    name: str
    kernel: Path
    initrd: Path
    overlay: Path
    agent_socket: Path
    console_log: Path
    memory_mb: int
    vcpus: int
    """vCPUs the guest keeps online once its desktop is up (the sandbox's ``cpus``, rounded up)."""
    screen: tuple[int, int]
    accelerator: Accelerator
    boot_vcpus: int = 0
    """vCPUs the domain has (0: ``vcpus``). More than ``vcpus`` lets a boot run its parallel parts
    at once (the agent's start beside the desktop's); the guest's init takes the extra ones
    offline when the boot's work is done (``cubicle.cpus=``, images/vm/cubicle-init)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    network: str | None = None
    """A libvirt network to attach a virtio NIC to (the NAT'd network of ``open`` on Linux)."""
    egress_channel: Path | None = None
    """``allow:``/``block:``/``ask:``: the unix socket of the sandbox's egress proxy, which
    QEMU connects to as the host side of the virtio-serial port :data:`EGRESS_CHANNEL` (no NIC)."""
    extra_cmdline: tuple[str, ...] = ()
    """More kernel command line items (``open``'s guest address, the egress relay's port)."""
    pids_limit: int = 0
    arch: str = field(default_factory=platform.machine)

    @property
    def aarch64(self) -> bool:
        """Whether the guest is an ARM one (``virt`` machine, PL011 console, ACPI's PCI routing);
        otherwise x86-64 (``pc`` machine, 16550 console, the BIOS's PCI routing)."""
        return self.arch in AARCH64_MACHINES

    @property
    def domain_vcpus(self) -> int:
        """The domain's vCPU count: ``boot_vcpus``, at least ``vcpus``."""
        return max(self.vcpus, self.boot_vcpus)

    @property
    def kept_vcpus(self) -> int | None:
        """``vcpus`` when the domain boots with more (its guest is told to keep that many online
        after the boot: ``cubicle.cpus=``); None when it keeps every vCPU it booted with."""
        return self.vcpus if self.domain_vcpus > self.vcpus else None

    def cmdline(self) -> str:
        console = "ttyAMA0" if self.aarch64 else "ttyS0"
        parts = [
            "root=/dev/vda",
            "rw",
            f"console={console}",
            "init=/sbin/cubicle-init",
            "quiet",
            # no self-tests of the kernel's crypto algorithms at boot: ~0.6 s of a cold boot under
            # TCG (initcall_debug: crypto_algapi_init 620 ms of 2.7 s of initcalls)
            "cryptomgr.notests",
            # the same for the SP800-108 KDF (its initcall is only a self-test: ~110 ms) and no
            # kprobe tracing (~75 ms): the largest initcalls after ACPI's
            "initcall_blacklist=crypto_kdf108_init,init_kprobe_trace",
            f"cubicle.screen={self.screen[0]}x{self.screen[1]}",
        ]
        if not self.aarch64:
            # PCI interrupts routed by the BIOS's table, not by evaluating ACPI's interrupt link
            # devices: each virtio device's probe ran AML for its link (~0.2-0.4 s apiece of a
            # cold boot's module loads under TCG). ACPI keeps the rest (power-off, the CPUs).
            parts.append("acpi=noirq")
        if self.kept_vcpus is not None:
            parts.append(f"cubicle.cpus={self.kept_vcpus}")
        if self.pids_limit > 0:
            parts.append(f"cubicle.pids={self.pids_limit}")
        parts.extend(self.extra_cmdline)
        return " ".join(parts)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


def domain_xml(plan: DomainPlan) -> str:
    """The libvirt domain XML of ``plan`` (for ``createXML``: transient, destroyed on poweroff)."""
    aarch64 = plan.aarch64
    domain = ET.Element("domain", {"type": plan.accelerator.domain_type})
    _sub(domain, "name", plan.name)
    metadata = _sub(domain, "metadata")
    labels = ET.SubElement(metadata, f"{{{METADATA_NS}}}labels")
    for key, value in sorted(plan.labels.items()):
        ET.SubElement(labels, f"{{{METADATA_NS}}}label", {"key": key, "value": value})
    # VM generation ID: libvirt gives every restore of a saved state a new one, and the guest
    # kernel (CONFIG_VMGENID=y) reseeds its RNG when it changes: warm sandboxes do not share
    # random state
    _sub(domain, "genid")
    _sub(domain, "memory", str(plan.memory_mb), unit="MiB")
    _sub(domain, "vcpu", str(plan.domain_vcpus))
    os_el = _sub(domain, "os")
    if aarch64:
        _sub(os_el, "type", "hvm", arch="aarch64", machine="virt")
    else:
        _sub(os_el, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_el, "kernel", str(plan.kernel))
    _sub(os_el, "initrd", str(plan.initrd))
    _sub(os_el, "cmdline", plan.cmdline())
    if plan.accelerator.kind == "tcg":
        cpu = _sub(domain, "cpu", mode="maximum", migratable="off")
    else:
        cpu = _sub(domain, "cpu", mode="host-passthrough")
    # the vCPUs are cores of one socket: a second vCPU then takes its delay-loop calibration from
    # its sibling, where one in a socket of its own times the loop itself (~0.6-0.8 s of a cold
    # boot under TCG, with the other vCPU waiting)
    _sub(cpu, "topology", sockets="1", dies="1", cores=str(plan.domain_vcpus), threads="1")
    features = _sub(domain, "features")
    _sub(features, "acpi")
    _sub(domain, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(domain, event, "destroy")
    devices = _sub(domain, "devices")
    disk = _sub(devices, "disk", type="file", device="disk")
    _sub(disk, "driver", name="qemu", type="qcow2", cache="unsafe", discard="unmap")
    _sub(disk, "source", file=str(plan.overlay))
    _sub(disk, "target", dev="vda", bus="virtio")
    if not aarch64:
        _sub(devices, "controller", type="usb", model="none")
    channel = _sub(devices, "channel", type="unix")
    _sub(channel, "source", mode="bind", path=str(plan.agent_socket))
    _sub(channel, "target", type="virtio", name=AGENT_PORT)
    view = _sub(devices, "channel", type="unix")
    _sub(view, "source", mode="bind", path=str(plan.agent_socket.with_name(VIEW_SOCKET)))
    _sub(view, "target", type="virtio", name=VIEW_CHANNEL)
    if plan.egress_channel is not None:
        egress = _sub(devices, "channel", type="unix")
        _sub(egress, "source", mode="connect", path=str(plan.egress_channel))
        _sub(egress, "target", type="virtio", name=EGRESS_CHANNEL)
    serial = _sub(devices, "serial", type="file")
    _sub(serial, "source", path=str(plan.console_log))
    _sub(serial, "target", port="0")
    if plan.network is not None:
        interface = _sub(devices, "interface", type="network")
        _sub(interface, "source", network=plan.network)
        _sub(interface, "model", type="virtio")
    _sub(devices, "memballoon", model="none")
    ET.register_namespace(METADATA_PREFIX, METADATA_NS)
    return ET.tostring(domain, encoding="unicode")


def labels_from_xml(xml: str) -> dict[str, str]:
    """cubicle's labels from a domain's XML; ``{}`` for a domain that is not cubicle's."""
    try:
        root = ET.fromstring(xml)  # noqa: S314 — XML from our own libvirtd / saved state
    except ET.ParseError:
        return {}
    found = root.find(f"metadata/{{{METADATA_NS}}}labels")
    if found is None:
        return {}
    return {
        element.get("key", ""): element.get("value", "")
        for element in found.findall(f"{{{METADATA_NS}}}label")
        if element.get("key")
    }


def retarget_saved_xml(
    xml: str, *, overlay: Path, agent_socket: Path, console_log: Path, labels: Mapping[str, str]
) -> str:
    """Rewrite a saved state's domain XML for a new sandbox restored from it.

    Keeps name and UUID (libvirt refuses others on restore) and the guest ABI; changes only the
    host-side paths (overlay disk, agent socket and the view socket beside it, console file) and
    the labels. (libvirt itself
    gives the restored domain a new VM generation ID, which must not be set here.)
    """
    ET.register_namespace(METADATA_PREFIX, METADATA_NS)
    root = ET.fromstring(xml)  # noqa: S314 — XML from our own libvirtd / saved state
    source = root.find("devices/disk/source")
    channel = root.find("devices/channel/source")
    serial = root.find("devices/serial/source")
    if source is None or channel is None or serial is None:
        raise ValueError("saved domain XML lacks a disk, channel or serial source")
    source.set("file", str(overlay))
    for element in (source, channel, serial):
        for child in list(element):  # drop stale <seclabel> etc. of the golden domain
            element.remove(child)
    channel.set("path", str(agent_socket))
    for view in root.findall("devices/channel"):
        target, view_source = view.find("target"), view.find("source")
        if target is None or view_source is None or target.get("name") != VIEW_CHANNEL:
            continue
        for child in list(view_source):
            view_source.remove(child)
        view_source.set("path", str(agent_socket.with_name(VIEW_SOCKET)))
    serial.set("path", str(console_log))
    for log in root.findall("devices/serial/log") + root.findall("devices/console/source"):
        if log.get("file"):
            log.set("file", str(console_log))
        if log.get("path"):
            log.set("path", str(console_log))
    metadata = root.find("metadata")
    if metadata is None:
        metadata = ET.SubElement(root, "metadata")
    for old in metadata.findall(f"{{{METADATA_NS}}}labels"):
        metadata.remove(old)
    element = ET.SubElement(metadata, f"{{{METADATA_NS}}}labels")
    for key, value in sorted(labels.items()):
        ET.SubElement(element, f"{{{METADATA_NS}}}label", {"key": key, "value": value})
    return ET.tostring(root, encoding="unicode")
