"""A second Docker engine on this machine that shares nothing with the test but the kernel.

:class:`EngineBox` starts, in a network namespace of its own (``cubicle-rt-<pid>-<hex>``):

- a veth pair: ``cvh<hex>`` (this side, ``10.X.Y.1/30``) ↔ ``cve<hex>`` (the namespace,
  ``10.X.Y.2/30``); the namespace has no other interface than loopback and no default route, so
  nothing in it reaches anything but these two addresses;
- ``dockerd`` with its own data-root, exec-root, pidfile, socket, config file (empty: the
  host's ``/etc/docker/daemon.json`` is not read), cgroup parent (``/cubicle-rt-…``, cgroupfs)
  and containerd (the one dockerd starts and manages under its exec-root: the host's engine
  runs its own managed containerd too, and no system containerd socket exists for dockerd to
  pick up instead — checked). It listens on ``tcp://10.X.Y.2:2376`` with TLS verified both
  ways (a CA, server and client certificates generated here with ``cryptography``). Its default
  bridge is ``cbr<hex>``, made by the box; ``--iptables`` stays on: the rules dockerd writes
  (NAT for the egress proxy, isolation of ``internal`` networks — what ``allow:`` relies on) go
  into the namespace's own tables, which vanish with it. ``--iptables=false --bridge=none``
  would not do: ``allow:`` needs a default bridge for the proxy and the isolation rules of
  internal networks, and testing without them would test something else than what runs;
- ``sshd`` (Debian's openssh-server, its own config, host key and pid file) on
  ``10.X.Y.2:22``: one key, whose ``authorized_keys`` entry is ``restrict`` and forces
  ``docker -H unix://<box socket> system dial-stdio`` — what docker-py's ssh transport runs.

Nothing of the host's engine is touched: not its socket, its bridge, its iptables chains or its
containerd. Every process is the box's child (killed by pid; ``PR_SET_PDEATHSIG`` ends them if
the test process dies), and :meth:`EngineBox.close` removes everything: containers via the
API, dockerd (SIGTERM by pid, then SIGKILL), sshd, any process still in the namespace or naming
the box's folder (managed containerd, shims), the namespace (and so the veth pair and its
iptables tables), the cgroup folders, mounts and the box's folder. :func:`sweep_stale` removes
what a box whose test process was killed (SIGKILL: no finalizer) left.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import docker
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PREFIX: Final = "cubicle-rt-"
ROOT: Final = Path("/tmp")
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
TLS_PORT: Final = 2376
SSH_PORT: Final = 22
START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 20.0
PR_SET_PDEATHSIG: Final = 1
PRIVSEP_DIR: Final = Path("/run/sshd")


class BoxError(RuntimeError):
    """The box could not be started (with the daemon's log tail)."""


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise BoxError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies (kept across exec)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 in 10.200.0.0/13 that no route or address of this host overlaps."""
    routes = json.loads(_run("ip", "-j", "-4", "route", "show", "table", "all"))
    taken = []
    for route in routes:
        dst = route.get("dst", "")
        if dst and dst not in ("default", "broadcast"):
            with contextlib.suppress(ValueError):
                taken.append(ipaddress.ip_network(dst, strict=False))
    pool = ipaddress.ip_network("10.200.0.0/13")
    for _ in range(200):
        candidate = ipaddress.IPv4Network(
            (int(pool.network_address) + random.randrange(pool.num_addresses // 4) * 4, 30)
        )
        if not any(candidate.overlaps(net) for net in taken):
            return candidate
    raise BoxError("no free /30 in 10.200.0.0/13")


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass
class Tls:
    """Files of the generated PKI: a CA, the server's pair (SAN = its IP), the client's."""

    server_dir: Path
    client_dir: Path


def make_tls(folder: Path, server_ip: str) -> Tls:
    """Generate a CA, a server certificate for ``server_ip`` and a client certificate."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cubicle test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        name: str, usage: x509.ObjectIdentifier, san: x509.GeneralName | None
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
        )
        if san is not None:
            builder = builder.add_extension(x509.SubjectAlternativeName([san]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return (
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )

    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    tls = Tls(folder / "server", folder / "client")
    for where, (cert, key) in (
        (
            tls.server_dir,
            leaf(
                server_ip,
                ExtendedKeyUsageOID.SERVER_AUTH,
                x509.IPAddress(ipaddress.ip_address(server_ip)),
            ),
        ),
        (tls.client_dir, leaf("cubicle test client", ExtendedKeyUsageOID.CLIENT_AUTH, None)),
    ):
        where.mkdir(mode=0o700, parents=True)
        (where / "ca.pem").write_bytes(ca_pem)
        (where / "cert.pem").write_bytes(cert)
        (where / "key.pem").write_bytes(key)
        (where / "key.pem").chmod(0o600)
    return tls


@dataclass
class EngineBox:
    """A second dockerd (and sshd) in a network namespace of its own; see the module docstring.

    Use as a context manager, or :meth:`start` then :meth:`close` (always, even when start
    failed half-way)."""

    tag: str = field(default_factory=lambda: f"{os.getpid()}-{secrets.token_hex(3)}")
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        short = self.tag.rsplit("-", 1)[1]
        self.name = PREFIX + self.tag
        self.folder = ROOT / self.name
        self.host_if = f"cvh{short}"
        self.box_if = f"cve{short}"
        self.bridge = f"cbr{short}"
        self.cgroup_parent = f"/{self.name}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.made_privsep_dir = False

    # -- addresses -------------------------------------------------------------------------

    @property
    def host_ip(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    @property
    def box_ip(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 2)

    @property
    def tcp_url(self) -> str:
        return f"tcp://{self.box_ip}:{TLS_PORT}"

    @property
    def ssh_url(self) -> str:
        return f"ssh://root@{self.box_ip}:{SSH_PORT}"

    @property
    def socket(self) -> Path:
        return self.folder / "docker.sock"

    @property
    def client_tls(self) -> Path:
        return self.folder / "tls" / "client"

    @property
    def ssh_home(self) -> Path:
        """A HOME whose ``.ssh/config`` and ``known_hosts`` reach the box's sshd."""
        return self.folder / "home"

    # -- start -------------------------------------------------------------------------------

    def __enter__(self) -> EngineBox:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.folder.mkdir(mode=0o700)
        self.subnet = _free_subnet()
        self._network()
        tls = make_tls(self.folder / "tls", self.box_ip)
        self._dockerd(tls)
        self._sshd()

    def _enter(self) -> list[str]:
        """Run in the box's network namespace only (``ip netns exec`` would also mount a sysfs
        of the namespace over /sys, hiding the cgroup hierarchies dockerd needs)."""
        return ["nsenter", f"--net=/run/netns/{self.name}", "--"]

    def _in_box(self, *argv: str) -> str:
        return _run(*self._enter(), *argv)

    def _network(self) -> None:
        _run("ip", "netns", "add", self.name)
        _run(
            "ip", "link", "add", self.host_if, "type", "veth",
            "peer", "name", self.box_if, "netns", self.name,
        )  # fmt: skip
        assert self.subnet is not None
        prefix = self.subnet.prefixlen
        _run("ip", "addr", "add", f"{self.host_ip}/{prefix}", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        self._in_box("ip", "link", "set", "lo", "up")
        self._in_box("ip", "addr", "add", f"{self.box_ip}/{prefix}", "dev", self.box_if)
        self._in_box("ip", "link", "set", self.box_if, "up")
        # dockerd's default bridge, under a name of ours, with a subnet that overlaps nothing
        # (it only exists inside the namespace anyway)
        self._in_box("ip", "link", "add", self.bridge, "type", "bridge")
        self._in_box("ip", "addr", "add", "172.31.254.1/24", "dev", self.bridge)
        self._in_box("ip", "link", "set", self.bridge, "up")

    def _spawn(
        self, name: str, argv: list[str], *, own_mounts: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the box's network namespace (and, with ``own_mounts``, in a mount
        namespace of its own whose mounts vanish with its last process); its pid is ``argv``'s
        (nsenter and unshare exec)."""
        mounts = ["unshare", "--mount", "--propagation", "slave", "--"] if own_mounts else []
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 — kept by the child
        try:
            process = subprocess.Popen(
                [*self._enter(), *mounts, *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 — prctl only, no locks
                start_new_session=True,
            )
        finally:
            log.close()
        self.processes[name] = process
        return process

    def log_tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.folder / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def _dockerd(self, tls: Tls) -> None:
        config = self.folder / "daemon.json"
        config.write_text("{}")
        self._spawn(
            "dockerd",
            [
                "dockerd",
                "--config-file", str(config),
                "--data-root", str(self.folder / "data"),
                "--exec-root", str(self.folder / "exec"),
                "--pidfile", str(self.folder / "dockerd.pid"),
                "--host", f"unix://{self.socket}",
                "--host", self.tcp_url,
                "--tlsverify",
                "--tlscacert", str(tls.server_dir / "ca.pem"),
                "--tlscert", str(tls.server_dir / "cert.pem"),
                "--tlskey", str(tls.server_dir / "key.pem"),
                "--bridge", self.bridge,
                "--iptables=true",
                "--ip6tables=false",
                "--userland-proxy=false",
                "--exec-opt", "native.cgroupdriver=cgroupfs",
                "--cgroup-parent", self.cgroup_parent,
                "--storage-driver", "overlay2",
                "--log-level", "warn",
            ],
            own_mounts=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.processes["dockerd"].poll() is not None:
                break
            if self.socket.exists():
                client = docker.DockerClient(base_url=f"unix://{self.socket}", timeout=5)
                try:
                    client.ping()
                    return
                except docker.errors.DockerException:
                    pass
                finally:
                    client.close()
            time.sleep(0.1)
        raise BoxError(f"the box's dockerd did not start:\n{self.log_tail('dockerd')}")

    def _sshd(self) -> None:
        ssh = self.folder / "ssh"
        ssh.mkdir(mode=0o700)
        for key in ("host_key", "client_key"):
            _run(
                "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", self.name, "-f", str(ssh / key)
            )
        dial = f"docker -H unix://{self.socket} system dial-stdio"
        client_pub = (ssh / "client_key.pub").read_text().strip()
        (ssh / "authorized_keys").write_text(f'restrict,command="{dial}" {client_pub}\n')
        config = ssh / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.box_ip}:{SSH_PORT}",
                    f"HostKey {ssh / 'host_key'}",
                    f"PidFile {ssh / 'sshd.pid'}",
                    f"AuthorizedKeysFile {ssh / 'authorized_keys'}",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",  # the box's folder is under /tmp
                    "AllowTcpForwarding no",
                    "X11Forwarding no",
                    "PermitTTY no",
                    "",
                ]
            )
        )
        if not PRIVSEP_DIR.exists():
            PRIVSEP_DIR.mkdir(mode=0o755)
            self.made_privsep_dir = True
        self._spawn("sshd", ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)])
        home = self.ssh_home / ".ssh"
        home.mkdir(mode=0o700, parents=True)
        host_pub = (ssh / "host_key.pub").read_text().split()
        (home / "known_hosts").write_text(f"{self.box_ip} {host_pub[0]} {host_pub[1]}\n")
        (home / "config").write_text(
            f"Host {self.box_ip}\n  User root\n  IdentityFile {ssh / 'client_key'}\n"
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.processes["sshd"].poll() is not None:
                break
            if f"{self.box_ip}:{SSH_PORT}" in self._in_box("ss", "-Hltn"):
                return
            time.sleep(0.05)
        raise BoxError(f"the box's sshd did not start:\n{self.log_tail('sshd')}")

    # -- clean up ----------------------------------------------------------------------------

    def close(self) -> None:
        """Remove everything the box made; safe to call on a half-started box, and twice."""
        errors: list[str] = []

        def attempt(what: str, step: object) -> None:
            try:
                step()  # type: ignore[operator]
            except Exception as exc:  # every step runs whatever the others did
                errors.append(f"{what}: {exc}")

        attempt("containers", self._remove_containers)
        for name in ("dockerd", "sshd"):
            attempt(name, lambda name=name: self._stop(name))
        attempt("leftover processes", lambda: kill_box_processes(self.name, self.folder))
        attempt("veth pair", lambda: remove_link(self.host_if))
        attempt("namespace", lambda: remove_namespace(self.name))
        attempt("cgroups", lambda: remove_cgroups(self.name))
        attempt("mounts", lambda: unmount_under(self.folder))
        attempt("folder", lambda: shutil.rmtree(self.folder, ignore_errors=False))
        if self.made_privsep_dir:
            remove_privsep_dir()
            self.made_privsep_dir = False
        if errors and any(Path(p).exists() for p in (self.folder,)):
            raise BoxError("the engine box left things behind: " + "; ".join(errors))

    def _remove_containers(self) -> None:
        process = self.processes.get("dockerd")
        if process is None or process.poll() is not None or not self.socket.exists():
            return
        client = docker.DockerClient(base_url=f"unix://{self.socket}", timeout=30)
        try:
            for container in client.containers.list(all=True):
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
            client.networks.prune()
        finally:
            client.close()

    def _stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)


def _processes_of(name: str, folder: Path) -> list[int]:
    """Pids in the box's namespace, in its cgroups (containers: they have namespaces of their
    own), or whose command line names its folder (containerd, shims)."""
    pids: set[int] = set()
    for hierarchy in CGROUP_ROOT.iterdir():
        for procs in (hierarchy / name).rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    with contextlib.suppress(BoxError):
        pids.update(int(p) for p in _run("ip", "netns", "pids", name).split())
    marker = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes():
                    pids.add(int(entry.name))
    pids.discard(os.getpid())
    return sorted(pids)


def kill_box_processes(name: str, folder: Path) -> None:
    """SIGKILL, by pid, every process of the box still alive, and wait until they are gone."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pids := _processes_of(name, folder):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise BoxError(f"processes {pids} of {name} survive SIGKILL")
        time.sleep(0.05)


def remove_privsep_dir() -> None:
    """Remove ``/run/sshd`` (sshd's compiled-in privilege separation folder, which a box makes
    when missing) unless some sshd still runs — another box's, or the host's own."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "sshd":
                    return
    with contextlib.suppress(OSError):
        PRIVSEP_DIR.rmdir()  # only when empty


def remove_link(name: str) -> None:
    """Delete our end of the veth pair (the other end goes with it, at once)."""
    if Path(f"/sys/class/net/{name}").exists():
        _run("ip", "link", "del", name)


def remove_namespace(name: str) -> None:
    """Delete the namespace (its veth pair, bridges and iptables tables go with it)."""
    if (Path("/run/netns") / name).exists():
        _run("ip", "netns", "del", name)


def remove_cgroups(name: str) -> None:
    """rmdir the box's cgroup parent in every hierarchy, deepest first (empty by now)."""
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for folder in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            folder.rmdir()
        top.rmdir()


def unmount_under(folder: Path) -> None:
    """Unmount whatever is still mounted under ``folder`` in this mount namespace."""
    for point in sorted(_mounts_under(folder), key=len, reverse=True):
        _run("umount", "-l", point)


def leftovers(name: str, folder: Path, host_if: str) -> list[str]:
    """What of the box still exists (empty after :meth:`EngineBox.close`)."""
    found = [f"process {pid}" for pid in _processes_of(name, folder)]
    if (Path("/run/netns") / name).exists():
        found.append(f"namespace {name}")
    if Path(f"/sys/class/net/{host_if}").exists():
        found.append(f"interface {host_if}")
    if folder.exists():
        found.append(f"folder {folder}")
    found += [f"cgroup {h / name}" for h in CGROUP_ROOT.iterdir() if (h / name).exists()]
    found += [f"mount {m}" for m in _mounts_under(folder)]
    return found


def _mounts_under(folder: Path) -> list[str]:
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if (line.split()[4] + "/").startswith(str(folder) + "/")
    ]


def sweep_stale() -> list[str]:
    """Remove boxes whose test process is gone (killed before its finalizer ran)."""
    swept = []
    names = {p.name for p in ROOT.glob(PREFIX + "*")}
    if Path("/run/netns").is_dir():
        names |= {p.name for p in Path("/run/netns").glob(PREFIX + "*")}
    for name in sorted(names):
        pid = name.removeprefix(PREFIX).split("-")[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        folder = ROOT / name
        kill_box_processes(name, folder)
        remove_link("cvh" + name.rsplit("-", 1)[1])
        remove_namespace(name)
        remove_cgroups(name)
        unmount_under(folder)
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(name)
    if swept:
        remove_privsep_dir()
    return swept
