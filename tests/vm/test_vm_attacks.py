"""Attacks on a VM sandbox's neighbours (issue 15, rows 5 and 6), from inside a real guest:
``open`` has no path to the host's loopback services, and no other local user can read a
sandbox's disk, files or saved states."""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import network as vm_network
from cubicle.orchestrator.sandbox import wait_ready
from tests.support.guest_probes import DIRECT_PROBE, PROXY_PROBE
from tests.support.listener import Listener, host_addresses
from tests.support.sockets import NOBODY_CONNECT, as_nobody, inet_socket_inodes, socket_inodes

pytestmark = [pytest.mark.attack, pytest.mark.vm, pytest.mark.slow]

QEMU_SLIRP_HOST = "10.0.2.2"
"""Where QEMU user-mode networking (the old ``open``) shows the host's 127.0.0.1 to the guest."""


def guest_run(provider: VmProvider, sandbox_id: str, code: str, *args: str) -> dict[str, Any]:
    done = provider.exec(sandbox_id, ["python3", "-c", code, *args], timeout=90)
    assert done.exit_code == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_row5_open_vm_has_no_path_to_host_loopback(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    loopback = Listener("127.0.0.1")  # a host service meant for the host alone
    public = Listener("0.0.0.0")  # control: a host service on every address
    try:
        info = vm_provider.create(SandboxSpec(network=NetworkPolicy.parse("open")))
        leak_check.append(info.id)
        try:
            wait_ready(vm_provider, info.id, timeout=240)
            targets = [
                f"{host}:{loopback.port}"
                for host in [QEMU_SLIRP_HOST, "GATEWAY", *host_addresses()]
            ]
            seen = guest_run(vm_provider, info.id, DIRECT_PROBE, *targets, f"GATEWAY:{public.port}")
        finally:
            vm_provider.destroy(info.id)
    finally:
        loopback.close()
        public.close()
    assert seen["gateway"], seen  # open: the guest has a route out
    # the host's loopback service: no address leads to it
    for target in targets:
        assert seen[target] != "connected", (target, seen)
    assert loopback.accepted == 0
    # control: open still reaches host services that listen beyond loopback, so the probe can
    # tell (and 'open' is a real network, as docs/backends.md says)
    assert seen[f"GATEWAY:{public.port}"] == "connected", seen
    assert public.accepted == 1
    if _host_resolves("deb.debian.org"):  # names resolve as on the host (libvirt's forwarder)
        assert seen["dns"] == "resolved", seen


def test_row5_open_without_bridges_is_the_proxy_and_reaches_no_host_service(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """``open`` where libvirt has no bridges (macOS, ``qemu:///session``; forced here): no NIC,
    the egress proxy with nothing blocked. Its address guard keeps the host's loopback, private
    and link-local addresses out (QEMU user networking would show the host's 127.0.0.1 at
    10.0.2.2); no bridge or firewall rule is made."""
    portable = VmProvider(home=vm_provider.home, uri=vm_provider.uri, open_bridges=False)
    portable.image = vm_provider.image
    loopback = Listener("127.0.0.1")
    public = Listener("0.0.0.0")
    hosts = ["127.0.0.1", "localhost", QEMU_SLIRP_HOST, "169.254.169.254", *host_addresses()]
    try:
        info = portable.create(SandboxSpec(network=NetworkPolicy.parse("open")))
        leak_check.append(info.id)
        try:
            pieces = sorted(
                kind
                for kind, ids in vm_network.leftovers(portable.conn, portable.home).items()
                if info.id in ids
            )
            wait_ready(portable, info.id, timeout=240)
            direct = guest_run(
                portable, info.id, DIRECT_PROBE, f"{QEMU_SLIRP_HOST}:{loopback.port}"
            )
            urls = [
                f"http://{host}:{port}/" for host in hosts for port in (loopback.port, public.port)
            ]
            seen = guest_run(portable, info.id, PROXY_PROBE, *urls)
            log = portable.egress_log(info.id)
        finally:
            portable.destroy(info.id)
    finally:
        loopback.close()
        public.close()
    assert pieces == ["proxy"]  # no libvirt network, no firewall rule
    assert direct[f"{QEMU_SLIRP_HOST}:{loopback.port}"] != "connected", direct
    assert direct["gateway"] is None, direct  # no NIC, no route
    for url in urls:  # refused by the proxy's address guard, never connected
        assert seen[url][0] in (403, 502), (url, seen)
    assert loopback.accepted == 0 and public.accepted == 0
    assert '"policy": "block:invalid"' in log


def _host_resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, 80)
    except OSError:
        return False
    return True


def _others_may(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode) & 0o007


def test_row6_other_users_cannot_read_a_running_sandbox(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    secret = "cubicle-secret-" + secrets.token_hex(16)
    info = vm_provider.create(SandboxSpec())
    leak_check.append(info.id)
    try:
        wait_ready(vm_provider, info.id, timeout=240)
        wrote = vm_provider.exec(
            info.id,
            ["python3", "-c", PLANT, "/home/cubicle/secret.txt", secret],
            timeout=90,
        )
        assert wrote.exit_code == 0, wrote.stderr
        run = vm_provider.home / "run" / info.id
        overlay = run / "overlay.qcow2"
        # control: the secret is on the host, in the sandbox's overlay (root can read it)
        assert secret.encode() in overlay.read_bytes()
        nobody = {
            "read the overlay": as_nobody("cat", str(overlay)),
            "list the run folder": as_nobody("ls", str(run)),
            "read the console log": as_nobody("cat", str(run / "console.log")),
            "list the run folders": as_nobody("ls", str(vm_provider.home / "run")),
            "list the warm states": as_nobody("ls", str(vm_provider.home / "warm")),
        }
        slot = None
        if info.detail["start"].startswith("warm:"):
            slot = _slot_directory(vm_provider, info.id)
        exposed = [
            f"{oct(stat.S_IMODE(p.lstat().st_mode))} {p}"
            for root in [run, *([slot] if slot else [])]
            for p in [root, *root.rglob("*")]
            if _others_may(p)
        ]
        home_mode = stat.S_IMODE(vm_provider.home.stat().st_mode)
    finally:
        vm_provider.destroy(info.id)
    for what, done in nobody.items():
        leaked = secret.encode() in done.stdout
        assert done.returncode != 0 and not leaked, (
            what,
            "nobody could",
            leaked,
            done.stdout[:200],
        )
        assert b"Permission denied" in done.stderr, (what, done.stderr)
    assert exposed == []
    assert home_mode & 0o007 == 0o001  # others may only pass through (to the proxy script)


PLANT = """
import os, sys
path, secret = sys.argv[1], sys.argv[2]
with open(path, "w") as file:
    file.write((secret + "\\n") * 64)
    file.flush()
    os.fsync(file.fileno())
os.sync()
"""


def _slot_directory(provider: VmProvider, sandbox_id: str) -> Path:
    """The warm slot directory whose golden overlay backs the sandbox's overlay."""
    done = subprocess.run(
        [
            "qemu-img",
            "info",
            "-U",
            "--output=json",
            str(provider.home / "run" / sandbox_id / "overlay.qcow2"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(done.stdout)["backing-filename"]).parent


def test_px3_no_other_sandbox_reaches_a_vm_sandboxs_proxy(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    """PX3: an ``ask:`` VM sandbox's proxy must not be reachable by another sandbox (an ``open``
    VM through its bridge, an ``open`` Docker container through its gateway) or another user,
    or they could raise questions in its queue. The proxy holds no TCP or UDP socket at all: it
    listens only on its channel socket in the sandbox's run folder (root's and QEMU's group's
    alone) and its root-only control socket; an unprivileged user cannot connect to either. The
    VM's pieces are made without booting its guest."""
    sandbox_id = "vm-0feedface0"
    leak_check.append(sandbox_id)
    run = vm_provider.home / "run" / sandbox_id
    run.mkdir(parents=True)
    vm_provider.files.restrict(run, 0o750)  # as VmProvider.new_run_dir makes it
    try:
        vm_network.setup_channel(
            sandbox_id,
            NetworkPolicy.parse("ask:", ask_timeout=60),
            run,
            proxy_home=vm_provider.home,
            files=vm_provider.files,
        )
        [pid] = [
            pid
            for pid, label in vm_network._proxy_processes(vm_provider.home)
            if label == sandbox_id
        ]
        proxy_inet = socket_inodes(pid) & inet_socket_inodes()
        channel = (run / vm_network.CHANNEL_SOCKET).lstat()
        tried = {
            name: as_nobody("/usr/bin/python3", "-I", "-c", NOBODY_CONNECT, str(run / name))
            for name in (vm_network.CHANNEL_SOCKET, vm_network.CONTROL_SOCKET)
        }
    finally:
        vm_network.teardown(vm_provider.conn, sandbox_id, run, home=vm_provider.home)
        shutil.rmtree(run)
    assert proxy_inet == set(), "the proxy holds a TCP/UDP socket: something could reach it"
    assert channel.st_mode & 0o007 == 0
    for name, done in tried.items():
        assert done.stdout.decode().strip() == "PermissionError", (name, done)
