"""The network pieces of a VM sandbox that is not ``none``, created per sandbox and removed by id.

``allow:``, ``block:`` and ``ask:`` — **no network card, no bridge, no firewall rule**
(:func:`setup_channel`): the guest's only way out is a second virtio-serial port,
``org.cubicle.egress``, beside the agent's. Its host side is ``<run>/egress-channel.sock``, a
unix socket root binds (root:QEMU ``0660`` in the root:QEMU ``0750`` run folder) and hands, as a
listening descriptor, to the sandbox's egress proxy (``python3 -I <home>/proxy/<hash>/egress.pyz
--channel-fd N --label vm-XXXXXXXXXX …``, a host process, as ``nobody`` when started by root,
in its own session, its decisions in ``<run>/egress.log`` and its pid + start time in
``<run>/egress.json``); QEMU connects to it when the domain starts. In the guest,
``cubicle_guest.egress_relay`` listens on ``127.0.0.1:3128`` (the guest's ``HTTP(S)_PROXY``)
and carries every connection to the proxy as one stream of :mod:`cubicle_guest.egress_mux`.
The guest has only ``lo``: no DNS, no route, no address of the host or of another sandbox; no
other process on the host can reach the proxy (its only listener is that socket). In ask mode
root also binds the proxy's control socket (``<run>/egress-control.sock``, ``0600``).

``open`` (Linux as root, :func:`setup`) — the bridge path, kept for ``open`` only because it
gives the guest the real network (any TCP/UDP, DNS), which no proxy does: a transient libvirt
network ``cubicle-vm-XXXXXXXXXX`` on bridge ``cbvm-XXXXXXXXXX`` with the host at
``10.231.N.1/24`` (a free ``/24`` of :data:`SUBNET_POOL`) and the guest at ``10.231.N.2`` (set by
its init from the kernel command line; no DHCP), NAT'd to the host's uplinks (``<forward
mode='nat'>``, libvirt's own rules) with libvirt's DNS forwarder on ``10.231.N.1``; and iptables
rules tagged with the comment ``cubicle-vm-XXXXXXXXXX``:

  - never the host's loopback: the kernel does not route ``127.0.0.0/8`` from a bridge, and a
    ``raw``-table rule drops such packets before any DNAT could send them elsewhere. (QEMU
    user-mode networking maps ``10.0.2.2`` to the host's ``127.0.0.1``: never used.)
  - ip6tables drops all IPv6 from the bridge (link-local addresses);
  - the host's address on the bridge answers only the sandbox's own bridge and the host itself
    (``INPUT -d 10.231.N.1 ! -i cbvm-… -j REJECT``): no other sandbox reaches its DNS forwarder.

Who cleans up: :func:`teardown` (called by ``VmProvider.destroy`` and, for the ids
:func:`leftovers` names, by ``VmProvider.gc``) finds every piece by the sandbox id alone — the
network by name, the rules by comment, the proxy by the ``--label`` on its command line — so a
creator killed half-way leaves nothing that gc cannot find. Proxies are searched only among the
backend directory's own (their script lies in ``<home>/proxy``): root's gc never ends the proxy of
another user's sandbox on their ``qemu:///session``, nor another backend directory's.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import pwd
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cubicle.egress.bundle import BUNDLE_NAME, bundle_bytes
from cubicle.egress.proxy import EGRESS_PORT
from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.hostprocs import processes
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.providers.vm import host_tools
from cubicle.orchestrator.providers.vm.files import FileAccess
from cubicle.orchestrator.providers.vm.virt import libvirt_module, map_libvirt_errors
from cubicle_guest.waiting import Deadline, poll

__all__ = [
    "CHANNEL_SOCKET",
    "SUBNET_POOL",
    "EgressChannel",
    "VmNetwork",
    "bridge_name",
    "leftovers",
    "network_name",
    "remove_network",
    "remove_rules",
    "rule_comment",
    "setup",
    "setup_channel",
    "stop_proxy",
    "teardown",
]

SUBNET_POOL: Final = ipaddress.IPv4Network("10.231.0.0/16")
"""Where the per-sandbox ``/24`` subnets come from (one per ``open`` sandbox)."""
NAME_PREFIX: Final = "cubicle-"
PROXY_READY_S: Final = 10.0
PROXY_STOP_S: Final = 5.0
CHANNEL_SOCKET: Final = "egress-channel.sock"
"""Proxied modes: the proxy's listening socket in the run folder; QEMU connects to it (the host
side of the guest's virtio-serial port
:data:`~cubicle.orchestrator.providers.vm.domain.EGRESS_CHANNEL`)."""
CONTROL_SOCKET: Final = "egress-control.sock"
"""Ask mode: the proxy's control socket in the run folder (root's alone, 0600)."""
LIBVIRT_DNSMASQ_DIR: Final = Path("/var/lib/libvirt/dnsmasq")
_ID = re.compile(r"vm-[0-9a-z]+")
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Proxies this process started, kept so they are reaped (and not reported by ``Popen.__del__``
as still running) when :func:`teardown` stops them."""


def network_name(sandbox_id: str) -> str:
    """The libvirt network of ``sandbox_id`` (also the iptables rule comment)."""
    return NAME_PREFIX + sandbox_id


rule_comment = network_name


def bridge_name(sandbox_id: str) -> str:
    """``cbvm-`` + the id's hex part: at most 15 characters (Linux's interface name limit)."""
    return ("cbvm-" + sandbox_id.removeprefix("vm-"))[:15]


@dataclass(frozen=True)
class VmNetwork:
    """What the domain and the guest need: the ``open`` sandbox's libvirt network and the
    guest's settings."""

    sandbox_id: str
    name: str
    bridge: str
    subnet: ipaddress.IPv4Network

    @property
    def host_address(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 1

    @property
    def guest_address(self) -> ipaddress.IPv4Address:
        return self.subnet.network_address + 2

    def cmdline(self) -> tuple[str, ...]:
        """Kernel command line item read by ``images/vm/cubicle-init``: address/prefix,
        gateway and resolver (both the host's address on the bridge)."""
        address = f"{self.guest_address}/{self.subnet.prefixlen}"
        return (f"cubicle.net={address},{self.host_address},{self.host_address}",)


# --------------------------------------------------------------------------- setup


@dataclass(frozen=True)
class EgressChannel:
    """The way out of an ``allow:``/``block:``/``ask:`` sandbox: no network card, a second
    virtio-serial port (:data:`~cubicle.orchestrator.providers.vm.domain.EGRESS_CHANNEL`) whose
    host side is the unix socket ``socket`` in the run folder, where the sandbox's egress proxy
    listens (QEMU connects to it). In the guest, ``cubicle_guest.egress_relay`` listens on
    ``127.0.0.1:3128`` and carries every connection to the proxy over the port
    (:mod:`cubicle_guest.egress_mux`)."""

    sandbox_id: str
    socket: Path

    @property
    def proxy_url(self) -> str:
        """The guest's ``HTTP(S)_PROXY``: the relay on its own loopback."""
        return f"http://127.0.0.1:{EGRESS_PORT}"

    def cmdline(self) -> tuple[str, ...]:
        """Kernel command line item read by ``images/vm/cubicle-init``: start the relay on this
        port and point the proxy variables at it."""
        return (f"cubicle.egress={EGRESS_PORT}",)


def setup(
    conn: Any, sandbox_id: str, policy: NetworkPolicy, run: Path, *, proxy_home: Path
) -> VmNetwork:
    """Create the NAT'd network and the firewall rules of an ``open`` sandbox (Linux, root:
    the bridge path, kept for ``open`` only; ``allow:``/``block:``/``ask:`` use
    :func:`setup_channel`).

    ``run`` is the sandbox's run directory (it must exist); ``proxy_home`` is unused here (kept
    for the callers of the bridge path). On failure the caller tears down (:func:`teardown`
    finds every piece by ``sandbox_id``).

    :raises ProviderError: naming the piece that could not be made.
    """
    del proxy_home
    if policy.mode != "open":
        raise ValueError(f"vm_network.setup is for the open policy, got {policy}")
    network = _create_network(conn, sandbox_id)
    _add_rules(network)
    return network


def setup_channel(
    sandbox_id: str, policy: NetworkPolicy, run: Path, *, proxy_home: Path, files: FileAccess
) -> EgressChannel:
    """Start the egress proxy of an ``allow:``/``block:``/``ask:`` sandbox on its channel: no
    libvirt network, no bridge, no firewall rule.

    Root (or we, on ``qemu:///session``) binds ``run/egress-channel.sock`` (root:QEMU ``0660``:
    ``files``; the run folder admits nobody else) and hands the listening descriptor to the
    proxy, which runs as ``nobody`` when started by root; QEMU connects to it when the domain
    starts. ``proxy_home``: where the proxy script is copied (:func:`proxy_script`). On failure
    the caller tears down (:func:`teardown` finds the proxy by ``sandbox_id``).

    :raises ProviderError: the proxy did not start.
    """
    if not policy.proxied:
        raise ValueError(f"vm_network.setup_channel is for proxied policies, got {policy}")
    path = run / CHANNEL_SOCKET
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        files.restrict(path, 0o660)
        listener.listen(4)
        _start_proxy(sandbox_id, policy, run, proxy_script(proxy_home), channel=listener)
    finally:
        listener.close()
    return EgressChannel(sandbox_id, path)


def _used_subnets(conn: Any) -> set[ipaddress.IPv4Network]:
    used = set()
    with map_libvirt_errors("list networks"):
        networks = conn.listAllNetworks(0)
    for net in networks:
        with contextlib.suppress(Exception):  # a network that vanished while listing
            root = ET.fromstring(net.XMLDesc(0))  # noqa: S314 — XML from our own libvirtd
            for ip in root.findall("ip"):
                address, prefix = ip.get("address"), ip.get("prefix")
                netmask = ip.get("netmask")
                if address and (prefix or netmask):
                    used.add(ipaddress.ip_network(f"{address}/{prefix or netmask}", strict=False))
    return {n for n in used if isinstance(n, ipaddress.IPv4Network)}


def _create_network(conn: Any, sandbox_id: str, attempts: int = 8) -> VmNetwork:
    libvirt = libvirt_module()
    name, bridge = network_name(sandbox_id), bridge_name(sandbox_id)
    if os.geteuid() == 0:  # libvirt writes <bridge>.macs here; Debian makes it only for 'default'
        LIBVIRT_DNSMASQ_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    used = _used_subnets(conn)
    free = [s for s in SUBNET_POOL.subnets(new_prefix=24) if s not in used]
    last = "no free /24 left"
    for subnet in random.sample(free, min(attempts, len(free))):
        network = VmNetwork(sandbox_id, name, bridge, subnet)
        root = ET.Element("network")
        ET.SubElement(root, "name").text = name
        ET.SubElement(root, "forward", mode="nat")
        ET.SubElement(root, "bridge", name=bridge, stp="off", delay="0")
        ET.SubElement(root, "dns", enable="yes")
        ET.SubElement(root, "ip", address=str(network.host_address), prefix="24")
        try:
            conn.networkCreateXML(ET.tostring(root, encoding="unicode"))
        except libvirt.libvirtError as exc:
            # another sandbox (or a host route) took this subnet since we listed: try another
            last = exc.get_error_message()
            continue
        return network
    raise ProviderError(
        f"could not create the network {name} of {sandbox_id} in {SUBNET_POOL} "
        f"after {attempts} subnets: {last}"
    )


def _iptables(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    path = host_tools.require_tool(tool, needed_for="open VM sandboxes")
    return subprocess.run([path, "-w", *args], capture_output=True, text=True, check=False)


Rule = tuple[str, str, str, list[str]]
"""(tool, table, chain, rule spec) of one firewall rule."""
TABLE_CHAINS: Final = (("filter", "INPUT"), ("filter", "FORWARD"), ("raw", "PREROUTING"))
"""Where a sandbox's rules live (gc scans these)."""


def _rules(network: VmNetwork) -> list[Rule]:
    """The sandbox's rules, in the order they end up at the top of their chains."""
    tag = ["-m", "comment", "--comment", rule_comment(network.sandbox_id)]
    bridge = network.bridge
    ipv6 = [
        ("ip6tables", "filter", "INPUT", ["-i", bridge, *tag, "-j", "DROP"]),
        ("ip6tables", "filter", "FORWARD", ["-i", bridge, *tag, "-j", "DROP"]),
        ("ip6tables", "filter", "FORWARD", ["-o", bridge, *tag, "-j", "DROP"]),
    ]
    # the host's address on this bridge (libvirt's DNS forwarder) is this sandbox's alone: the
    # host itself reaches it (lo); any other interface — another sandbox's bridge, Docker's, the
    # LAN — is refused
    host = ["-d", str(network.host_address)]
    own_address = [
        ("iptables", "filter", "INPUT", [*host, "-i", "lo", *tag, "-j", "ACCEPT"]),
        ("iptables", "filter", "INPUT", [*host, "!", "-i", bridge, *tag, "-j", "REJECT"]),
    ]
    loopback = ["-i", bridge, "-d", "127.0.0.0/8", *tag, "-j", "DROP"]
    return [("iptables", "raw", "PREROUTING", loopback), *own_address, *ipv6]


def _add_rules(network: VmNetwork) -> None:
    # inserted bottom-up at position 1, so they end in _rules' order above everything else
    for tool, table, chain, rule in reversed(_rules(network)):
        done = _iptables(tool, "-t", table, "-I", chain, "1", *rule)
        if done.returncode != 0:
            raise ProviderError(
                f"{tool} refused a rule of sandbox {network.sandbox_id} "
                f"(-t {table} {chain} {' '.join(rule)}): {done.stderr.strip()}"
            )


def _proxy_user() -> dict[str, Any]:
    """Drop to ``nobody`` when root (the proxy needs no privilege), else run as we are."""
    if os.geteuid() != 0:
        return {}
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return {}
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def proxy_python_check() -> str | None:
    """``None`` when the proxy's Python can import h11, else what is wrong (for doctor)."""
    python = _proxy_python()
    done = subprocess.run(
        [python, "-I", "-c", "import h11"], capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        return None
    return f"{python} cannot import h11, which the egress proxy (allow:, block:, ask:) needs"


def _proxy_python() -> str:
    """A Python any user can run: the system one (with Debian's ``python3-h11``,
    scripts/host-packages/vm.txt) when root, else ours (h11 is a dependency of cubicle)."""
    system = Path("/usr/bin/python3")
    return str(system) if os.geteuid() == 0 and system.exists() else sys.executable


def proxy_script(home: Path) -> Path:
    """``<home>/proxy/<hash>/egress.pyz``: the proxy as one file (:mod:`cubicle.egress.bundle`)
    that ``nobody`` can read (the run directories cannot be entered by other users), one per
    version of its sources."""
    source = bundle_bytes()
    directory = home / "proxy" / hashlib.sha256(source).hexdigest()[:16]
    script = directory / BUNDLE_NAME
    if script.is_file() and script.read_bytes() == source:
        return script
    directory.mkdir(parents=True, exist_ok=True)
    for path in (home / "proxy", directory):
        path.chmod(0o755)
    partial = directory / f".egress-{os.getpid()}.tmp"
    partial.write_bytes(source)
    partial.chmod(0o644)
    partial.replace(script)
    return script


def _private_file(path: Path) -> int:
    """Open ``path`` for appending, created ``0600`` (root's alone; QEMU does not need it)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)


def _start_proxy(
    sandbox_id: str, policy: NetworkPolicy, run: Path, script: Path, *, channel: socket.socket
) -> None:
    argv = [_proxy_python(), "-I", str(script), "--channel-fd", str(channel.fileno())]
    argv += ["--label", sandbox_id, *policy.proxy_arguments]
    control = None
    if policy.mode == "ask":
        # root binds the control socket (0600, in the root-only run folder) and hands the
        # listening descriptor to the proxy, which runs as nobody
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = run / CONTROL_SOCKET
        path.unlink(missing_ok=True)
        control.bind(str(path))
        os.chmod(path, 0o600)
        control.listen(8)
        argv += ["--ask-timeout", f"{policy.ask_timeout:g}", "--control-fd", str(control.fileno())]
    log_path = run / "egress.log"
    try:
        with os.fdopen(_private_file(log_path), "ab") as log_file:
            proxy = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives its creator until destroy/gc, like the domain
                close_fds=True,
                pass_fds=(channel.fileno(),) + (() if control is None else (control.fileno(),)),
                **_proxy_user(),
            )
    finally:
        if control is not None:
            control.close()
    _CHILDREN[proxy.pid] = proxy
    with os.fdopen(_private_file(run / "egress.json"), "w") as record:
        record.write(json.dumps({"pid": proxy.pid, "start_time": _start_time(proxy.pid)}) + "\n")
    for _ in poll(Deadline(PROXY_READY_S), 0.05):
        if '"event": "listening"' in log_path.read_text(errors="replace"):
            return
        if proxy.poll() is not None:
            break
    tail = log_path.read_text(errors="replace").strip().splitlines()[-10:]
    raise ProviderError(
        f"the egress proxy of {sandbox_id} did not listen on its channel "
        f"{run / CHANNEL_SOCKET} within {PROXY_READY_S:.0f} s "
        f"(exit code {proxy.poll()}): " + " | ".join(tail)
    )


# --------------------------------------------------------------------------- teardown


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (clock ticks since boot): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _proxy_processes(home: Path) -> Iterator[tuple[int, str]]:
    """(pid, sandbox id) of every running egress proxy of the VM backend whose directory is
    ``home`` (found by its command line: its script is ``<home>/proxy/<hash>/egress.pyz``,
    :func:`proxy_script`). Another home's proxies — another user's sandboxes on their
    ``qemu:///session``, another provider's — are never this home's to find or end."""
    scripts = f"{os.path.abspath(home / 'proxy')}/"
    for process in processes():
        argv = [arg.decode("utf-8", "replace") for arg in process.argv]
        if len(argv) < 3 or not any(
            a.endswith(f"/{BUNDLE_NAME}") and a.startswith(scripts) for a in argv[:3]
        ):
            continue
        if "--label" in argv[:-1]:
            label = argv[argv.index("--label") + 1]
            if _ID.fullmatch(label):
                yield process.pid, label


def _stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    child = _CHILDREN.pop(pid, None)
    if child is not None:  # our own child: wait reaps it
        try:
            child.wait(PROXY_STOP_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return
    for _ in poll(Deadline(PROXY_STOP_S), 0.02):
        if _start_time(pid) is None or _is_zombie(pid):
            return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _stop_proxy(sandbox_id: str, run: Path | None, home: Path) -> None:
    record = run / "egress.json" if run is not None else None
    if record is not None and record.exists():
        with contextlib.suppress(OSError, ValueError, KeyError):
            saved = json.loads(record.read_text())
            pid = int(saved["pid"])
            if saved.get("start_time") and _start_time(pid) == saved["start_time"]:
                _stop(pid)
    for pid, label in _proxy_processes(home):
        if label == sandbox_id:
            _stop(pid)


def _tagged_rules() -> Iterator[tuple[str, str, str, list[str]]]:
    """(tool, sandbox id, table, rule spec for ``-D``) of every cubicle VM rule in the chains of
    :data:`TABLE_CHAINS`."""
    for tool in ("iptables", "ip6tables"):
        if host_tools.find_tool(tool) is None:
            continue
        for table, chain in TABLE_CHAINS:
            listed = _iptables(tool, "-t", table, "-S", chain)
            for line in listed.stdout.splitlines():
                words = shlex.split(line)  # parses iptables' own output; nothing is run by a shell
                if len(words) < 2 or words[0] != "-A" or "--comment" not in words[:-1]:
                    continue
                comment = words[words.index("--comment") + 1]
                if comment.startswith(NAME_PREFIX) and _ID.fullmatch(
                    comment.removeprefix(NAME_PREFIX)
                ):
                    yield tool, comment.removeprefix(NAME_PREFIX), table, words[1:]


def _remove_rules(sandbox_ids: set[str]) -> None:
    """Delete the rules of ``sandbox_ids``. A rule another process deleted since the listing
    (a concurrent ``gc`` or ``down``) is gone, which is what was wanted: not a failure."""
    failures = []
    for tool, sandbox_id, table, rule in _tagged_rules():
        if sandbox_id in sandbox_ids:
            done = _iptables(tool, "-t", table, "-D", *rule)
            if done.returncode != 0 and _iptables(tool, "-t", table, "-C", *rule).returncode == 0:
                failures.append(f"{tool} -t {table} -D {' '.join(rule)}: {done.stderr.strip()}")
    if failures:
        raise ProviderError("could not remove firewall rules: " + "; ".join(failures))


def _destroy_network(conn: Any, name: str) -> None:
    libvirt = libvirt_module()
    try:
        net = conn.networkLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_NETWORK:
            return
        raise ProviderError(f"libvirt could not look up network {name}: {exc}") from exc
    try:
        if net.isActive():
            net.destroy()  # transient: destroying removes it
        if net.isPersistent():
            net.undefine()
    except libvirt.libvirtError as exc:
        # gone or stopped meanwhile (a concurrent gc or down): what was wanted
        gone = (libvirt.VIR_ERR_NO_NETWORK, libvirt.VIR_ERR_OPERATION_INVALID)
        if exc.get_error_code() not in gone:
            raise ProviderError(f"libvirt could not remove network {name}: {exc}") from exc


def stop_proxy(sandbox_id: str, run: Path | None, *, home: Path) -> None:
    """End the egress proxy of ``sandbox_id`` (by its record in ``run``, and by its label among
    the proxies of the backend directory ``home``)."""
    _stop_proxy(sandbox_id, run, home)


def remove_rules(sandbox_id: str) -> None:
    """Delete the firewall rules of ``sandbox_id``; only once its domain is gone (until then
    they are what keeps the guest from the host's services)."""
    _remove_rules({sandbox_id})


def remove_network(conn: Any, sandbox_id: str) -> None:
    """Remove the libvirt network of ``sandbox_id`` (once no domain is attached to it)."""
    _destroy_network(conn, network_name(sandbox_id))


def teardown(conn: Any, sandbox_id: str, run: Path | None, *, home: Path) -> None:
    """Stop the proxy, remove the rules and the network of ``sandbox_id``, one after the other
    (idempotent; a sandbox without a bridge network costs a network lookup, an iptables
    listing and a /proc scan). ``home``: the backend directory whose proxies are searched."""
    stop_proxy(sandbox_id, run, home=home)
    remove_rules(sandbox_id)
    remove_network(conn, sandbox_id)


def leftovers(conn: Any, home: Path) -> dict[str, set[str]]:
    """Sandbox ids that still have a network, firewall rules or a proxy process (of the backend
    directory ``home``), by kind."""
    with map_libvirt_errors("list networks"):
        names = [net.name() for net in conn.listAllNetworks(0)]
    return {
        "network": {
            n.removeprefix(NAME_PREFIX)
            for n in names
            if n.startswith(NAME_PREFIX) and _ID.fullmatch(n.removeprefix(NAME_PREFIX))
        },
        "rule": {sandbox_id for _tool, sandbox_id, _table, _rule in _tagged_rules()},
        "proxy": {sandbox_id for _pid, sandbox_id in _proxy_processes(home)},
    }
