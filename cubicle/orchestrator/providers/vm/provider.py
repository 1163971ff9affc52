"""The libvirt/QEMU VM backend: each sandbox is a transient domain on a qcow2 overlay of a read-only
base disk, reached through a virtio-serial unix channel.

Per sandbox ``vm-XXXXXXXXXX`` the provider creates, under ``<home>/run/<id>/`` (see
:func:`cubicle.orchestrator.providers.vm.image.vm_home`): ``overlay.qcow2`` (backed by the base or
by a warm slot's golden overlay), ``agent.sock`` (the channel; one connection at a time),
``console.log`` (the guest's serial console: init, X, agent) and ``labels.json`` (the owner and
expiry, so ``gc`` can remove the directory even when the domain never started) and, once the
agent answered, ``ready`` — the sandbox's ready mark (:mod:`cubicle.orchestrator.ownership`;
created once with ``O_EXCL`` by :meth:`VmProvider.mark_ready`); a warm-pool member's
``pool-member`` and, once claimed, ``claim.json``, whose stamp then counts (:mod:`.run_marks`). The
domain carries the same labels in its ``<metadata>``. ``gc`` judges each sandbox id on its own
(owner first, then a fresh read of the mark) and removes a doomed one with
:meth:`VmProvider.destroy`, whose per-sandbox steps are :meth:`VmProvider.cleanup_steps`. Run
directories and warm states are root's and QEMU's group's alone
(:mod:`cubicle.orchestrator.providers.vm.files`). :meth:`VmProvider.destroy` removes the domain and
the directory (and an ``allow:`` or ``open`` sandbox's network pieces, below); nothing else is
created.

Warm starts: see :mod:`cubicle.orchestrator.providers.vm.warm_start` (restore and save) and
:mod:`cubicle.orchestrator.providers.vm.warm` (saved golden states, one live restore per slot; with
every slot busy, a restore from a copy of a slot's state made in the run folder, ``state.save``,
removed once restored; a cold boot when there is no saved state or the network policy is not
``none``).

Network: ``none`` (default) → no NIC at all, the guest has only ``lo``. ``open`` → on Linux as root
(``qemu:///system``) a NIC on a per-sandbox NAT'd libvirt network: the guest reaches what the host
reaches, never the host's loopback; elsewhere (no bridges) the egress channel below with nothing
blocked (:data:`OPEN_WITHOUT_BRIDGES`), never QEMU user networking.
``allow:HOST[:PORT],...``, ``block:…``, ``ask:…`` → no NIC either: a second virtio-serial port whose
host side is the sandbox's egress proxy, which forwards exactly those origins and logs every
decision (no bridge, no firewall rule: :mod:`cubicle.orchestrator.providers.vm.network`;
:meth:`VmProvider.egress_log`). Proxied and ``open`` sandboxes always cold-boot (the saved warm
states have neither the NIC nor the egress port).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import platform
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, Final

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import ownership
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.errors import (
    ConfigError,
    EngineUnavailable,
    ImageBuildError,
    ImageMissing,
    ProviderError,
    SandboxNotFound,
    SandboxStartError,
)
from cubicle.orchestrator.hostdirs import host_folder
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import (
    AgentStream,
    DoctorCheck,
    Progress,
    Provider,
    SandboxInfo,
    SandboxSpec,
)
from cubicle.orchestrator.providers.vm import build as vm_build
from cubicle.orchestrator.providers.vm import host_tools, run_marks
from cubicle.orchestrator.providers.vm import image as vm_image
from cubicle.orchestrator.providers.vm import network as vm_network
from cubicle.orchestrator.providers.vm.domain import (
    AARCH64_MACHINES,
    VIEW_SOCKET,
    DomainPlan,
    domain_xml,
    labels_from_xml,
    probe_accelerator,
)
from cubicle.orchestrator.providers.vm.files import HOME_MODE, FileAccess, qemu_access
from cubicle.orchestrator.providers.vm.naming import ID_PREFIX
from cubicle.orchestrator.providers.vm.pool_members import VmPoolMembers, warm_up
from cubicle.orchestrator.providers.vm.qemu_process import end_qemu, find_qemu
from cubicle.orchestrator.providers.vm.virt import (
    DEFAULT_URI,
    map_libvirt_errors,
    open_connection,
    sandbox_state,
    unless_gone,
)
from cubicle.orchestrator.providers.vm.warm import WarmKey
from cubicle.orchestrator.providers.vm.warm_start import WarmStarter
from cubicle.orchestrator.readiness import wait_ready
from cubicle_guest.client import open_unix
from cubicle_guest.errors import CubicleError
from cubicle_guest.waiting import Deadline, poll

__all__ = ["VmProvider"]

log = logging.getLogger(__name__)

START = "cubicle-vm.start"
"""Extra label: ``cold``, ``warm:N`` (restored from slot N), ``warm-copy:N`` (from a copy of slot
N's state: every slot was busy) or ``golden`` (being saved)."""
IMAGE = "cubicle-vm.image"
ACCEL = "cubicle-vm.accelerator"
READY_TIMEOUT_S = 180.0
MIN_MEMORY_MB = 512
BOOT_VCPUS = 2
"""A domain boots with at least this many vCPUs (no more than the host's CPUs): the desktop's start
(Xvfb, openbox, the panel) and the agent's (imports, X set-up) then run at once — under TCG a
cold boot is CPU work, ~17 s on one vCPU and ~12 s on two here. The guest takes the vCPUs beyond
the sandbox's ``cpus`` offline as soon as its desktop is drawn and its agent built (the kernel
command line's ``cubicle.cpus=``), so a sandbox runs with the vCPUs it asked for; an offline vCPU
costs the host nothing (its thread sleeps)."""
KEEP_BUILDS = 3
"""How many of the newest image builds :meth:`VmProvider.build_image` keeps."""
SCREEN_LIMITS = (64, 8192)
UNLABELLED_GRACE_S = 600.0
"""A run folder without readable labels (a crash between mkdir and writing them) is an orphan
once this old."""
GONE_POLL_S = 0.01
"""How often a destroy looks whether libvirt has forgotten the domain (one cheap RPC)."""
DOCTOR_TOOLS: Final = (
    "qemu-img",
    "qemu-system-aarch64" if platform.machine() in AARCH64_MACHINES else "qemu-system-x86_64",
    *(("iptables", "ip6tables") if sys.platform == "linux" else ()),
)
"""Host programs ``cubicle doctor`` looks for (:mod:`.host_tools`): the overlays' qemu-img, the
hypervisor of this machine's architecture, and the firewall tools of ``open``'s bridge networks
(not on macOS, whose sandboxes use none)."""


CONSOLE_TAIL_BYTES: Final = 1 << 20
"""How much of the end of a console log ``logs`` reads, in bytes."""
QEMU_LOG_LINES: Final = 8
"""How many of QEMU's own log lines ``logs`` adds when the guest's console is still empty."""
OPEN_WITHOUT_BRIDGES: Final = NetworkPolicy.parse("block:invalid")
"""``open`` where there are no bridges (macOS, ``qemu:///session``): the egress proxy with nothing
blocked (``.invalid`` never resolves, RFC 2606), so HTTP and ``CONNECT`` tunnels to any port of any
public address — and, by the proxy's address guard, never the host's loopback, a private or
link-local address (another sandbox, the host's services): QEMU user networking, the only NIC
there, would show the host's loopback at ``10.0.2.2``."""


class VmProvider(Provider):
    """libvirt/QEMU sandboxes. ``CUBICLE_LIBVIRT_URI``, ``CUBICLE_VM_WARM_SLOTS`` (default 2;
    0 disables warm starts), ``CUBICLE_VM_ACCEL`` (kvm|tcg|hvf) and ``CUBICLE_VM_IMAGE`` (pin an
    image ref instead of the build of the current sources) configure it.

    :param home: the backend's directory (images, warm states, per-sandbox files).
    :param warm_slots: how many saved golden states per guest shape (sandboxes beyond that many
        at once are restored from a per-sandbox copy of one, ~0.1 s more).
    :param pool_key: make members of that warm pool (:meth:`mark_ready`;
        :meth:`pool_members` gives such a provider).
    """

    name: ClassVar[str] = "vm"

    def __init__(
        self,
        *,
        uri: str | None = None,
        home: Path | None = None,
        warm_slots: int | None = None,
        pool_key: str | None = None,
        open_bridges: bool | None = None,
    ) -> None:
        self.uri = uri or DEFAULT_URI
        self.open_bridges = (
            sys.platform == "linux" and os.geteuid() == 0 and self.uri.startswith("qemu:///system")
            if open_bridges is None
            else open_bridges
        )
        """``open`` as a NIC on a NAT'd bridge (Linux, root, ``qemu:///system``); otherwise
        ``open`` is the egress proxy with nothing blocked (:data:`OPEN_WITHOUT_BRIDGES`)."""
        self.home = home or vm_image.vm_home()
        self.warm_slots = (
            int(os.environ.get("CUBICLE_VM_WARM_SLOTS", "2")) if warm_slots is None else warm_slots
        )
        self.accelerator = probe_accelerator()
        self.image: str | None = os.environ.get("CUBICLE_VM_IMAGE") or None
        """Image ref used when a spec names none; ``None``: the build of the current sources."""
        self._conn: Any = None
        self.warm = WarmStarter(self)
        self.pool_key = pool_key
        """Set: this provider makes members of that warm pool (:meth:`mark_ready`)."""

    # -- engine --------------------------------------------------------------------------

    @property
    def conn(self) -> Any:
        if self._conn is None:
            self._conn = open_connection(self.uri)
        return self._conn

    def run_dir(self, sandbox_id: str) -> Path:
        if not sandbox_id.startswith(ID_PREFIX) or not sandbox_id[len(ID_PREFIX) :].isalnum():
            raise SandboxNotFound(f"{sandbox_id!r} is not a VM sandbox id (vm-…)")
        return self.home / "run" / sandbox_id

    def _domains(self) -> list[tuple[Any, dict[str, str]]]:
        """Every cubicle domain (running or being saved) with its labels."""
        with map_libvirt_errors("list domains"):
            domains = self.conn.listAllDomains(0)
        found = []
        for dom in domains:
            xml = unless_gone(functools.partial(dom.XMLDesc, 0))
            if xml is None:  # a domain that vanished while listing
                continue
            labels = labels_from_xml(xml)
            if labels.get(L.SANDBOX):
                found.append((dom, labels))
        return found

    def _domain(self, sandbox_id: str) -> Any | None:
        return next(
            (dom for dom, labels in self._domains() if labels[L.SANDBOX] == sandbox_id), None
        )

    # -- Provider: checks and image ------------------------------------------------------

    def doctor(self) -> list[DoctorCheck]:
        checks = []
        try:
            version = self.conn.getLibVersion()
            checks.append(
                DoctorCheck(
                    "libvirt",
                    True,
                    f"{self.uri} answers (libvirt {version // 1_000_000}.{version // 1000 % 1000})",
                )
            )
        except CubicleError as exc:
            checks.append(DoctorCheck("libvirt", False, str(exc), exc.hint))
        accel = self.accelerator
        checks.append(DoctorCheck("accelerator", True, f"{accel.kind}: {accel.reason}"))
        kvm = Path("/dev/kvm")
        if kvm.exists() and (kvm.stat().st_mode & 0o060) == 0:
            checks.append(
                DoctorCheck(
                    "/dev/kvm",
                    False,
                    "/dev/kvm is root-only: libvirtd re-probes QEMU on every create "
                    "(about a minute each)",
                    "run scripts/ensure-libvirt (sets group kvm, mode 0660)",
                )
            )
        try:
            image = vm_image.load_image(home=self.home)
            checks.append(
                DoctorCheck("image", True, f"VM image {image.ref} built ({image.directory})")
            )
        except ImageMissing as exc:
            checks.append(DoctorCheck("image", False, str(exc), exc.hint))
        problem = vm_network.proxy_python_check()
        checks.append(
            DoctorCheck(
                "egress proxy",
                problem is None,
                problem or "its Python imports h11",
                "scripts/ensure-host-packages (python3-h11)" if problem else None,
            )
        )
        checks += host_tools.tool_checks(DOCTOR_TOOLS)
        return checks

    def build_image(self, *, progress: Progress, force: bool = False) -> str:
        """Build the base disk/kernel/initramfs, then save the warm states of the default shape
        (slot 0 booted and saved, the other slots copies of it: :meth:`warm_up`). The golden
        boot checks that the image's fontconfig caches held (:func:`.build.check_font_caches`);
        if not, the image is removed and the build fails.

        The warm state needs libvirt; without it the build still succeeds (sandboxes cold-boot)
        but unchecked.

        :raises ImageBuildError: a build step failed, or the font caches did not hold.
        """
        image = vm_build.build(progress=progress, force=force, home=self.home)
        with contextlib.suppress(EngineUnavailable):
            for path in self._prune(keep=image.ref):
                progress(f"removed the unused older build {path}")
        if self.warm_slots > 0:

            def check(golden_id: str) -> None:
                vm_build.check_font_caches(image, lambda argv: self.exec(golden_id, argv))

            try:
                self.warm_up(SandboxSpec(image=image.ref), progress=progress, verify=check)
            except (EngineUnavailable, ProviderError, SandboxStartError) as exc:
                progress(f"warm state not saved ({exc}); sandboxes will cold-boot")
            except ImageBuildError:
                shutil.rmtree(image.directory, ignore_errors=True)  # not a usable build
                raise
        return image.ref

    def _prune(self, *, keep: str) -> builtins.list[Path]:
        """Remove older image builds (and their warm states) beyond the :data:`KEEP_BUILDS`
        newest, unless a domain uses them; return what was removed.

        Several builds are kept because test runs or users may pin one (``CUBICLE_VM_IMAGE``)
        while the sources change.
        """
        in_use = {labels.get(IMAGE) for _dom, labels in self._domains()} | {keep, self.image}
        images = self.home / "images"
        built = sorted(
            (p for p in images.glob("*/manifest.json") if ".tmp" not in p.parent.name),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        keep_refs = in_use | {p.parent.name for p in built[:KEEP_BUILDS]}
        removed = []
        for kind in ("images", "warm"):
            root = self.home / kind
            for path in sorted(root.iterdir()) if root.is_dir() else []:
                if path.is_dir() and path.name not in keep_refs and ".tmp" not in path.name:
                    if kind == "images" and not (path / "manifest.json").exists():
                        continue  # a build in progress, or a test's hand-made image
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path)
        return removed

    # -- Provider: lifecycle -------------------------------------------------------------

    def validate(self, spec: SandboxSpec) -> None:
        low, high = SCREEN_LIMITS
        width, height = spec.screen
        if not all(isinstance(v, int) and low <= v <= high for v in spec.screen):
            raise ConfigError(
                f"screen {width}x{height}: width and height must be integers {low}-{high} pixels"
            )
        if spec.memory_mb < MIN_MEMORY_MB:
            raise ConfigError(
                f"memory_mb={spec.memory_mb}: a VM guest needs at least {MIN_MEMORY_MB} MiB"
            )
        if spec.cpus <= 0:
            raise ConfigError(f"cpus={spec.cpus}: must be positive")
        host_cpus = os.cpu_count() or 1
        if math.ceil(spec.cpus) > host_cpus:
            raise ConfigError(
                f"cpus={spec.cpus}: more vCPUs than this host's {host_cpus} CPUs (a guest's "
                "vCPUs are host threads: more would only slow it down)"
            )

    def default_image(self) -> str:
        """``CUBICLE_VM_IMAGE`` if set, else the build of the current sources (must be built).

        :raises ImageMissing: naming the image and how to build it.
        """
        return vm_image.load_image(self.image, self.home).ref

    def warm_key(self, spec: SandboxSpec) -> WarmKey:
        """The guest shape a saved state must match for ``spec`` (see :mod:`.warm`)."""
        return WarmKey(
            spec.screen,
            spec.memory_mb,
            max(1, math.ceil(spec.cpus)),
            spec.pids_limit,
            self.accelerator.kind,
        )

    def labels_for(
        self,
        sandbox_id: str,
        spec: SandboxSpec,
        image: vm_image.VmImage,
        start: str,
        ttl_s: float | None = None,
    ) -> dict[str, str]:
        return L.create_labels(
            sandbox_id,
            "guest",
            owner=L.Owner.current(),
            ttl_s=spec.ttl_s if ttl_s is None else ttl_s,
            lifetime=ownership.lifetime_of(spec.detached),
            network=str(spec.network),
            screen=spec.screen,
            extra={START: start, IMAGE: image.ref, ACCEL: self.accelerator.kind},
        )

    def plan(
        self,
        name: str,
        *,
        run: Path,
        overlay: Path,
        spec: SandboxSpec,
        image: vm_image.VmImage,
        labels: dict[str, str],
        network: vm_network.VmNetwork | vm_network.EgressChannel | None = None,
    ) -> DomainPlan:
        key = self.warm_key(spec)
        return DomainPlan(
            name=name,
            kernel=image.kernel,
            initrd=image.initrd,
            overlay=overlay,
            agent_socket=run / "agent.sock",
            console_log=run / "console.log",
            memory_mb=key.memory_mb,
            vcpus=key.vcpus,
            boot_vcpus=min(BOOT_VCPUS, os.cpu_count() or 1),
            screen=spec.screen,
            accelerator=self.accelerator,
            labels=labels,
            network=network.name if isinstance(network, vm_network.VmNetwork) else None,
            egress_channel=(
                network.socket if isinstance(network, vm_network.EgressChannel) else None
            ),
            extra_cmdline=network.cmdline() if network is not None else (),
            pids_limit=spec.pids_limit,
        )

    @functools.cached_property
    def files(self) -> FileAccess:
        """Who may touch this backend's files besides root: QEMU's group (:mod:`.files`)."""
        with map_libvirt_errors("read the host capabilities"):
            return qemu_access(self.conn, self.accelerator.domain_type)

    def new_run_dir(self, sandbox_id: str, labels: dict[str, str]) -> Path:
        """``<home>/run/<id>/`` (must not exist) with ``labels.json``; private to root and QEMU's
        group, like ``<home>/run/`` (see :mod:`cubicle.orchestrator.providers.vm.files`)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.home.chmod(HOME_MODE)
        self.files.directories(self.home, self.home / "run")
        run = self.run_dir(sandbox_id)
        run.mkdir(mode=0o700)
        self.files.restrict(run, 0o750)
        self.write_labels(run, labels)
        return run

    def seal_socket(self, run: Path) -> None:
        """Make the agent and view sockets QEMU created (mode per its umask) their owner's and
        group's only."""
        for name in ("agent.sock", VIEW_SOCKET):
            with contextlib.suppress(FileNotFoundError):
                self.files.restrict(run / name, 0o660)

    def write_labels(self, run: Path, labels: dict[str, str]) -> None:
        """``labels.json`` of a run directory (read by gc when no domain exists)."""
        self.files.write_text(run / "labels.json", json.dumps(labels, indent=2) + "\n", 0o600)

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        self.validate(spec)
        # QEMU (libvirt-qemu) must read the run folders: 0755, but no one else may write them
        host_folder(self.home / "run", mode=0o755)
        image = vm_image.load_image(spec.image or self.image, self.home)
        self.conn  # noqa: B018 — fail with EngineUnavailable before creating anything
        sandbox_id = ID_PREFIX + secrets.token_hex(5)
        try:
            info = None
            if self.warm_slots > 0 and spec.network.mode == "none":
                info = self.warm.create(sandbox_id, spec, image)
            if info is None:
                info = self._create_cold(sandbox_id, spec, image)
        except BaseException:
            self.destroy(sandbox_id)
            raise
        return info

    def _create_cold(
        self, sandbox_id: str, spec: SandboxSpec, image: vm_image.VmImage
    ) -> SandboxInfo:
        labels = self.labels_for(sandbox_id, spec, image, "cold")
        run = self.new_run_dir(sandbox_id, labels)
        overlay = run / "overlay.qcow2"
        vm_image.create_overlay(image.base, overlay, self.files)
        network: vm_network.VmNetwork | vm_network.EgressChannel | None = None
        proxy_policy = spec.network
        if spec.network.mode == "open" and not self.open_bridges:
            proxy_policy = OPEN_WITHOUT_BRIDGES
        if proxy_policy.proxied:
            network = vm_network.setup_channel(
                sandbox_id, proxy_policy, run, proxy_home=self.home, files=self.files
            )
        elif spec.network.mode == "open":
            network = vm_network.setup(
                self.conn, sandbox_id, spec.network, run, proxy_home=self.home
            )
        plan = self.plan(
            f"cubicle-{sandbox_id}",
            run=run,
            overlay=overlay,
            spec=spec,
            image=image,
            labels=labels,
            network=network,
        )
        with map_libvirt_errors(f"start the domain of sandbox {sandbox_id}"):
            dom = self.conn.createXML(domain_xml(plan), 0)
        self.seal_socket(run)
        info = self.sandbox_info(dom, labels)
        assert info is not None  # our own labels parse
        return info

    def warm_up(
        self,
        spec: SandboxSpec,
        *,
        slots: int | None = None,
        progress: Progress | None = None,
        verify: Callable[[str], None] | None = None,
    ) -> int:
        """Make sure ``slots`` (default: all) golden states exist for ``spec``'s shape
        (:meth:`WarmStarter.warm_up`; ``verify`` checks each golden guest before it is saved).

        :return: how many valid golden states this shape now has.
        """
        return self.warm.warm_up(spec, slots=slots, progress=progress, verify=verify)

    def wait_painted(self, sandbox_id: str, plan: DomainPlan) -> None:
        """Wait (at most :data:`READY_TIMEOUT_S`) until the agent answers and the desktop is
        drawn (:func:`cubicle.orchestrator.readiness.wait_ready`), then until the guest has taken
        the boot's extra vCPUs offline (``plan``, the domain started for ``sandbox_id``, says how
        many it keeps: :data:`BOOT_VCPUS`): a golden guest is saved only then, so every sandbox
        restored from it runs with its vCPUs from the start.

        :raises SandboxStartError: not ready in time, or still more vCPUs online after 30 s.
        """
        wait_ready(self, sandbox_id, timeout=READY_TIMEOUT_S, painted=True)
        kept = plan.kept_vcpus
        if kept is None:
            return
        want = "0" if kept == 1 else f"0-{kept - 1}"
        online = ""
        for _ in poll(Deadline(30.0), 0.1):
            online = self.exec(sandbox_id, ["cat", "/sys/devices/system/cpu/online"]).stdout
            if online.strip() == want:
                return
        raise SandboxStartError(
            f"sandbox {sandbox_id}: its guest still has vCPUs {online.strip()!r} online 30 s "
            f"after its desktop was drawn, not {want!r}",
            sandbox_id=sandbox_id,
            log_tail=self.logs(sandbox_id, tail=20),
        )

    def open_stream(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        """The sandbox's channel socket (a host socket libvirt owns). Replies the guest queued
        for an earlier connection are skipped by id (the clients do that)."""
        sock = open_unix(self.agent_socket(sandbox_id), timeout=max(0.05, timeout))
        return AgentStream(sock, sandbox_id)

    def agent_socket(self, sandbox_id: str) -> str:
        return str(self.run_dir(sandbox_id) / "agent.sock")

    def logs(self, sandbox_id: str, *, tail: int = 50) -> str:
        """The last ``tail`` lines of the serial console, read from at most the file's last
        :data:`CONSOLE_TAIL_BYTES` (the guest's kernel writes the file: it is never read whole)."""
        path = self.run_dir(sandbox_id) / "console.log"
        try:
            with open(path, "rb") as source:
                size = source.seek(0, os.SEEK_END)
                source.seek(max(0, size - CONSOLE_TAIL_BYTES))
                data = source.read(CONSOLE_TAIL_BYTES)
        except OSError as exc:
            return f"(no console log for {sandbox_id}: {exc.strerror})"
        lines = data.decode("utf-8", "replace").splitlines()
        if any(line.strip() for line in lines):
            return "\n".join(lines[-tail:])
        return self._silent_guest(sandbox_id)

    def _silent_guest(self, sandbox_id: str) -> str:
        """What the host knows of a guest that has printed nothing on its console yet (a boot
        that has not reached its init): the domain's state and reason, the vCPU time it got,
        and the end of QEMU's own log — so a start-up error about it says where it stopped."""
        facts = [f"(the console of {sandbox_id} is empty: the guest printed nothing yet)"]
        try:
            dom = self._domain(sandbox_id)
        except CubicleError as exc:
            return "\n".join([*facts, f"(libvirt: {exc})"])
        if dom is None:
            return "\n".join([*facts, "(libvirt has no domain for it)"])
        state = unless_gone(dom.state)
        info = unless_gone(dom.info)
        if state is not None and info is not None:
            facts.append(
                f"domain {dom.name()}: state {state[0]}, reason {state[1]} (libvirt's "
                f"virDomainState numbers), {info[3]} vCPUs, {info[4] / 1e9:.1f} s of vCPU time"
            )
        facts.extend(self._qemu_log_tail(dom.name()))
        return "\n".join(facts)

    def _qemu_log_tail(self, domain_name: str) -> list[str]:
        """The last :data:`QEMU_LOG_LINES` of libvirt's log of QEMU for a domain (the system
        daemon's under /var/log/libvirt/qemu, the session daemon's under the user's cache)."""
        if self.uri.startswith("qemu:///system"):
            folder = Path("/var/log/libvirt/qemu")
        else:
            cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
            folder = Path(cache) / "libvirt" / "qemu" / "log"
        path = folder / f"{domain_name}.log"
        try:
            with open(path, "rb") as source:
                size = source.seek(0, os.SEEK_END)
                source.seek(max(0, size - 8192))
                lines = source.read().decode("utf-8", "replace").splitlines()
        except OSError as exc:
            return [f"(QEMU's log {path}: {exc.strerror})"]
        return [f"QEMU's log {path}:", *lines[-QEMU_LOG_LINES:]]

    def open_egress_control(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        """The ``ask:`` proxy's control socket: a root-only unix socket in the run folder."""
        path = self.run_dir(sandbox_id) / vm_network.CONTROL_SOCKET
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
            sock.close()
            raise ProviderError(
                f"cannot reach the egress control socket of {sandbox_id} ({exc.strerror}); "
                "is its network ask:?"
            ) from None
        sock.settimeout(None)
        return AgentStream(sock, f"the egress proxy of {sandbox_id}")

    def egress_log(self, sandbox_id: str, *, tail: int | str = "all") -> str:
        """The egress proxy's decision log (JSON lines) of an ``allow:`` sandbox; ``""`` for
        other sandboxes. ``tail``: how many last lines, or ``"all"``."""
        path = self.run_dir(sandbox_id) / "egress.log"
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        if tail == "all":
            return text
        return "\n".join(text.splitlines()[-int(tail) :]) + "\n"

    def mark_ready(self, sandbox_id: str) -> None:
        """Create the run folder's ``ready`` file (``O_EXCL``: once; :mod:`.run_marks`). A
        provider of pool members (``pool_key``) first takes one warm-up screenshot
        (:func:`.pool_members.warm_up`: reads the screen, writes nothing) and writes the member
        mark ``pool-member``, so that a ready member is never seen as a plain sandbox."""
        if self.pool_key is not None:
            warm_up(self, sandbox_id)
            with contextlib.suppress(FileNotFoundError):  # gone: the ready mark then says so
                run_marks.write_member(self.run_dir(sandbox_id), self.pool_key)
        try:
            run_marks.make_once(self.run_dir(sandbox_id) / run_marks.READY)
        except FileNotFoundError:
            raise SandboxNotFound(f"VM sandbox {sandbox_id} is gone") from None

    def pool_members(self) -> VmPoolMembers:
        """Warm-pool members of this backend (:mod:`.pool_members`)."""
        return VmPoolMembers(self, self._member_provider)

    def _member_provider(self, key: str) -> VmProvider:
        """A provider like this one (same libvirt, home, warm slots and image) that makes
        members of pool ``key``."""
        twin = VmProvider(uri=self.uri, home=self.home, warm_slots=self.warm_slots, pool_key=key)
        twin.image = self.image
        return twin

    def _ready(self, sandbox_id: str) -> bool:
        return (self.run_dir(sandbox_id) / run_marks.READY).exists()

    def remove_objects(self, sandbox_id: str) -> None:
        """Run the clean-up stages of :meth:`cleanup_steps` (idempotent): the steps of a stage
        at once, each stage once the one before it is done. A failure is raised when its stage
        is over; later stages do not run (the run folder stays, so ``gc`` finds the rest)."""
        self.run_dir(sandbox_id)  # checks the id
        for stage in self.cleanup_steps():
            if len(stage) == 1:
                stage[0](sandbox_id)
                continue
            with ThreadPoolExecutor(max_workers=len(stage)) as pool:
                futures = [pool.submit(step, sandbox_id) for step in stage]
            for future in futures:
                future.result()

    def cleanup_steps(self) -> builtins.list[builtins.list[Callable[[str], None]]]:
        """What ``down`` and ``gc`` do to remove one sandbox, in stages whose steps touch
        different objects: the domain together with an ``allow:`` sandbox's egress proxy; then,
        with no guest left to reach anything, the firewall rules together with the libvirt
        network (of ``allow:``/``open``); the run folder last (its labels say whose the rest is
        until then). Each step is idempotent; add a step here for a new kind of per-sandbox
        object."""
        return [
            [self._destroy_domain, self._stop_proxy],
            [self._remove_rules, self._remove_network],
            [self._remove_run_dir],
        ]

    def _networked_run(self, sandbox_id: str) -> Path | None:
        """The run folder, or None when its labels say network ``none``: only ``allow:``/
        ``open`` sandboxes ever get network pieces, made after those labels were written. (No
        readable labels: every piece is looked for by id.)"""
        run = self.run_dir(sandbox_id)
        labels = self.run_labels(run)
        return None if labels is not None and labels.get(L.NETWORK) == "none" else run

    def _stop_proxy(self, sandbox_id: str) -> None:
        if (run := self._networked_run(sandbox_id)) is not None:
            vm_network.stop_proxy(sandbox_id, run, home=self.home)

    def _remove_rules(self, sandbox_id: str) -> None:
        if self._networked_run(sandbox_id) is not None:
            vm_network.remove_rules(sandbox_id)

    def _remove_network(self, sandbox_id: str) -> None:
        if self._networked_run(sandbox_id) is not None:
            vm_network.remove_network(self.conn, sandbox_id)

    @staticmethod
    def run_labels(run: Path) -> dict[str, Any] | None:
        """The labels of a run folder (``labels.json``), or None when missing or unreadable."""
        try:
            labels = json.loads((run / "labels.json").read_text())
        except (OSError, ValueError):
            return None
        return labels if isinstance(labels, dict) else None

    def _remove_run_dir(self, sandbox_id: str) -> None:
        shutil.rmtree(self.run_dir(sandbox_id), ignore_errors=True)

    def _destroy_domain(self, sandbox_id: str) -> None:
        """End the domain's QEMU by pid (:mod:`.qemu_process`: libvirt's own destroy waits in
        200 ms steps), then have libvirt destroy the domain and wait until it forgets it."""
        dom = self._domain(sandbox_id)
        if dom is None:
            return
        run = self.run_dir(sandbox_id)
        pid = find_qemu(dom.name(), run)
        if pid is not None:
            end_qemu(pid, dom.name(), run)
        with map_libvirt_errors(f"destroy the domain of VM sandbox {sandbox_id}"):
            unless_gone(dom.destroy)
        self._wait_gone(dom)

    def _wait_gone(self, dom: Any, timeout: float = 10.0) -> None:
        """Return once libvirt no longer knows the domain (a warm slot's name is then free)."""
        uuid = dom.UUIDString()
        for _ in poll(Deadline(timeout), GONE_POLL_S):
            if unless_gone(functools.partial(self.conn.lookupByUUIDString, uuid)) is None:
                return
        log.warning("libvirt still lists domain %s %.0f s after destroy", dom.name(), timeout)

    def sandbox_info(self, dom: Any, labels: dict[str, str]) -> SandboxInfo | None:
        """The sandbox of a domain, or None (with a warning naming it) if its labels do not
        parse."""
        described = f"VM domain {dom.name()}"
        stamp = ownership.skip_malformed(described, labels, ID_PREFIX)
        if stamp is None:
            return None
        sandbox_id = stamp.sandbox_id
        run = self.run_dir(sandbox_id)
        claimed = run_marks.claim_labels(run)
        if claimed is not None:  # a claimed pool member: the pools' rule, the claim's stamp wins
            objects = [(described, labels), (f"VM claim {run / run_marks.CLAIM}", claimed)]
            stamp = marks.effective_stamps(objects, ID_PREFIX).get(sandbox_id, stamp)
        info = SandboxInfo.from_labels(
            stamp,
            labels,
            provider=self.name,
            state=sandbox_state(dom),
            ready=self._ready(sandbox_id),
            detail={
                "accelerator": labels.get(ACCEL, ""),
                "accelerator_reason": self.accelerator.reason,
                "start": labels.get(START, ""),
                "domain": dom.name(),
                "image": labels.get(IMAGE, ""),
                "agent_socket": self.agent_socket(sandbox_id),
            },
        )
        if info.ownership != "creating" and self._unclaimed_member(run):
            return dataclasses.replace(info, ownership="pool")
        return info

    @staticmethod
    def _unclaimed_member(run: Path) -> bool:
        """A warm-pool member nobody claimed yet (never to be used:
        :mod:`cubicle.orchestrator.pool`)."""
        return run_marks.member_key(run) is not None and not (run / run_marks.CLAIM).exists()

    def list(self) -> list[SandboxInfo]:
        infos = []
        for dom, labels in self._domains():
            with contextlib.suppress(CubicleError):
                info = self.sandbox_info(dom, labels)
                if info is not None:
                    infos.append(info)
        return infos

    def _candidates(self) -> set[str]:
        """Every sandbox id with any object: a domain, a run folder, network pieces."""
        ids: set[str] = set()
        for dom, labels in self._domains():
            if ownership.is_sandbox_id(labels[L.SANDBOX], ID_PREFIX):
                ids.add(labels[L.SANDBOX])
            else:
                log.warning(
                    "skipping VM domain %s: label %s=%r is not a sandbox id",
                    dom.name(),
                    L.SANDBOX,
                    labels[L.SANDBOX],
                )
        run_root = self.home / "run"
        if run_root.is_dir():
            ids.update(run.name for run in run_root.iterdir())
        ids.update(set().union(*vm_network.leftovers(self.conn, self.home).values()))
        return {i for i in ids if ownership.is_sandbox_id(i, ID_PREFIX)}

    def _stamp(self, sandbox_id: str, now: float) -> ownership.Stamp | str | None:
        """Read fresh: the sandbox's stamp (run folder's labels, else its domain's), or a reason
        it is an orphan without one, or None to skip it (malformed labels, warned about)."""
        run = self.run_dir(sandbox_id)
        labels = self.run_labels(run)
        what = f"VM run folder {run}"
        claimed = run_marks.claim_labels(run)
        if claimed is not None:  # a claimed pool member: judged by its claimer's stamp
            labels, what = claimed, f"VM claim {run / run_marks.CLAIM}"
        if labels is None:
            found = [(d, lab) for d, lab in self._domains() if lab[L.SANDBOX] == sandbox_id]
            if found:
                labels, what = found[0][1], f"VM domain {found[0][0].name()}"
            elif run.exists():
                age = now - run.stat().st_mtime
                return "orphan: unlabelled run folder" if age > UNLABELLED_GRACE_S else None
            else:
                # created first and removed last: without it the network pieces are orphans
                return "orphan: network pieces without a run folder or domain"
        return ownership.skip_malformed(what, labels, ID_PREFIX)

    def doomed(self) -> Iterator[tuple[str, str]]:
        """Judge each sandbox id on its own, reading its stamp fresh when reached
        (:func:`cubicle.orchestrator.ownership.verdict`, including half-made golden guests, whose
        owner is the warming process); :meth:`Provider.gc` destroys the doomed ones: domain, network
        pieces (proxy, firewall rules, libvirt network) and run folder."""
        for sandbox_id in sorted(self._candidates()):
            now = time.time()
            stamp = self._stamp(sandbox_id, now)
            if isinstance(stamp, ownership.Stamp):
                if stamp.sandbox_id != sandbox_id:
                    log.warning(
                        "skipping VM run folder %s: its labels name %s",
                        sandbox_id,
                        stamp.sandbox_id,
                    )
                    continue
                reason = ownership.verdict(stamp, functools.partial(self._ready, sandbox_id), now)
            else:
                reason = stamp
            if reason is not None:
                yield sandbox_id, reason
