"""A normal user runs VM sandboxes: no sudo, no capability, in no group but their own, with the
environment a login gets (PATH without /usr/sbin and /sbin), over their own ``qemu:///session``
daemon, from the built wheel installed into a venv of theirs with the system Python, booting the
image root built (found in the shared folder, or pinned by path).

As that user, one test: ``doctor``; a ``none`` sandbox (screenshot, exec, ls, and through the
public API from the user's own Python an XTEST click that lands at the exact pixel of a real X
window in the guest and Unicode typing that arrives byte-exact; ``cubicle view``: an RFB session
through the user's own view server and their VM's view channel, which ``down`` ends);
``allow:127.0.0.1:PORT`` (the host service on PORT through the proxy, another port refused);
``open`` (the proxy decides every request and keeps the host's loopback out, however named);
``ask:`` with nobody answering (the request is held for the ask timeout, then refused). Every
network mode has no network card and no direct connection to the host's loopback (nor QEMU user
networking's 10.0.2.2).

The test makes the user, their venv and runtime folder, and removes the user, their files and
every process of theirs (the session libvirtd and virtlogd) afterwards, by pid. No firewall rule
and no network link appears at any time (``iptables-save``, ``ip6tables-save``, ``ip -o link``
before, during and after)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import image as vm_image
from cubicle.orchestrator.providers.vm import network as vm_network
from cubicle.orchestrator.view_servers import SERVER_MODULE
from cubicle_guest.waiting import Deadline, poll
from tests.orchestrator.support import http_server
from tests.support.guest_probes import DIRECT_PROBE, UDP_PROBE
from tests.support.listener import host_addresses
from tests.support.sockets import NOBODY_CONNECT, as_nobody, inet_socket_inodes, socket_inodes
from tests.test_import_cycles import REPO
from tests.view.rfb import rfb_session, session_cookie_for

pytestmark = [pytest.mark.vm, pytest.mark.slow]

QEMU_SLIRP_HOST = "10.0.2.2"
"""Where QEMU user networking (no ``restrict=on``) shows the host's 127.0.0.1 to a guest."""
ASK_TIMEOUT_S = 3
SYSTEM_PYTHON = Path("/usr/bin/python3")
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
UV_INSTALL = [sys.executable, "-m", "uv", "pip", "install", "--quiet"]
LOCK = REPO / "requirements" / "host.txt"
RECORDER_SOURCE = REPO / "tests" / "support" / "recorder.py"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    home: Path
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``argv`` as this user (their groups only), with only :attr:`env` (what a login
        gets)."""
        as_user = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--init-groups", "--"]
        bare = ["env", "-i", *(f"{k}={v}" for k, v in self.env.items())]
        return subprocess.run(
            [*as_user, *bare, *argv],
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cubicle(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The user's installed ``cubicle ARGS`` (its time is printed: ``-s`` shows them)."""
        started = time.monotonic()
        done = self.run(str(self.home / "venv" / "bin" / "cubicle"), *args)
        print(f"[session user] cubicle {args[0]}: {time.monotonic() - started:.1f} s", flush=True)
        return done


def _pids_of(uid: int) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if proc.stat().st_uid == uid:
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def _end_processes_of(uid: int) -> None:
    """SIGKILL every process of ``uid`` (the user this test made), each by its pid, until none
    is left (their parent, or init, reaps them)."""
    for _ in poll(Deadline(30), 0.1):
        pids = _pids_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"processes of uid {uid} outlived SIGKILL: {_pids_of(uid)}")


def _host_network_lines() -> set[str]:
    lines = set()
    for argv in (["iptables-save"], ["ip6tables-save"], ["ip", "-o", "link"]):
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        lines |= {line for line in done.stdout.splitlines() if not line.startswith("#")}
    return lines


@pytest.fixture(scope="module")
def session_user(
    vm_provider: VmProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[User]:
    if not SYSTEM_PYTHON.exists() or shutil.which("useradd") is None:
        pytest.skip("needs the system Python and useradd")
    started = time.monotonic()
    wheels = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(wheels), str(REPO)],
        check=True,
        cwd=wheels,
    )
    (wheel,) = wheels.glob("cubicle-*.whl")
    name = "cubt" + secrets.token_hex(4)
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    user = pwd.getpwnam(name)
    home = Path(user.pw_dir)
    runtime = Path(f"/run/user/{user.pw_uid}")
    try:
        home.chmod(0o700)
        runtime.mkdir(parents=True, mode=0o700)
        os.chown(runtime, user.pw_uid, user.pw_gid)
        subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", str(home / "venv")], check=True)
        python = str(home / "venv" / "bin" / "python")
        subprocess.run(
            [*UV_INSTALL, "--python", python, "--constraint", str(LOCK), f"{wheel}[vm]"],
            check=True,
            cwd=home,
        )
        subprocess.run(["chown", "-R", f"{name}:{name}", str(home)], check=True)
        env = {
            "HOME": str(home),
            "USER": name,
            "LOGNAME": name,
            "PATH": "/usr/local/bin:/usr/bin:/bin",  # an unprivileged login's: no sbin
            "XDG_RUNTIME_DIR": str(runtime),
        }
        image = vm_image.load_image(vm_provider.image, vm_provider.home)
        if vm_image._shared_image(image.ref) is None:  # this run builds elsewhere: pin it
            env["CUBICLE_VM_IMAGE"] = str(image.directory)
        print(f"[session user] made in {time.monotonic() - started:.1f} s", flush=True)
        yield User(name, user.pw_uid, home, env)
    finally:
        started = time.monotonic()
        _end_processes_of(user.pw_uid)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)
        print(f"[session user] removed in {time.monotonic() - started:.1f} s", flush=True)
    assert _pids_of(user.pw_uid) == []


RECORD = """
import json, os, sys
sys.path.insert(0, "/home/cubicle")
from recorder import Recorder
left, top, width, height = json.loads(sys.argv[1])
chars = int(sys.argv[2])
try:
    with Recorder(os.environ["DISPLAY"], (left, top, width, height), motion=False) as rec:
        open("/home/cubicle/ready", "w").close()
        press = rec.wait_for(lambda e: e.kind == "ButtonPress", timeout=60, what="a click")
        rec.wait_until(
            lambda evs: sum(e.kind == "KeyRelease" and e.char is not None for e in evs) >= chars,
            timeout=60,
            what=f"{chars} characters",
        )
        out = {"press": [press.button, press.x, press.y, press.root_x, press.root_y]}
        out["text"] = rec.text()
except Exception as exc:
    out = {"error": repr(exc)}
with open("/home/cubicle/record.tmp", "w", encoding="utf-8") as file:
    json.dump(out, file)
os.rename("/home/cubicle/record.tmp", "/home/cubicle/record.json")
"""
"""Run in the guest by the agent's Python (python-xlib, cubicle_guest): maps the test's
:class:`tests.support.recorder.Recorder` window at the given box, records one click and
``chars`` typed characters, and writes what arrived to ``record.json``."""

INPUT = """
import contextlib, json, sys
from pathlib import Path
from cubicle import Sandbox
from cubicle_guest.errors import GuestError
from cubicle_guest.waiting import Deadline, poll

sandbox_id, recorder, record, box, text = sys.argv[1:6]
left, top = json.loads(box)[:2]

def wait_file(client, path):
    for _ in poll(Deadline(90), 0.1):
        with contextlib.suppress(GuestError):
            return client.read_file(path, timeout=30).blob
    said = client.read_file("/home/cubicle/record.log", timeout=30).blob.decode()
    raise SystemExit(f"no {path} in the guest within 90 s; the recorder said: {said}")

with Sandbox.attach(sandbox_id) as sandbox, sandbox.connect(timeout=60) as client:
    client.write_file("/home/cubicle/recorder.py", Path(recorder).read_bytes(), timeout=30)
    client.write_file("/home/cubicle/record.py", Path(record).read_bytes(), timeout=30)
    command = 'setsid -f python /home/cubicle/record.py "$1" "$2" >/home/cubicle/record.log 2>&1'
    argv = ["sh", "-c", command, "sh", box, str(len(text))]
    client.exec(argv, stdin="", timeout=30)
    wait_file(client, "/home/cubicle/ready")
    client.click(left + 237, top + 171, button="left", timeout=30)
    client.type(text, timeout=60)
    print(wait_file(client, "/home/cubicle/record.json").decode())
"""
"""Run on the host by the user's own venv Python: the public API (``Sandbox.attach``, the
typed client's ``write_file``, ``exec``, ``click``, ``type``, ``read_file``) clicks 237, 171
pixels into the recorder's window and types ``text``; prints what the window received."""
TYPED = "héllo — 東京 ✓"
RECORDER_BOX = [100, 80, 600, 400]

PROBE = """
import json, os, socket, time, urllib.request
proxy = os.environ["http_proxy"]
for name in ("no_proxy", "NO_PROXY"):
    os.environ.pop(name, None)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
out = {"proxy": proxy, "interfaces": sorted(os.listdir("/sys/class/net"))}
for url in os.sys.argv[2:]:
    started = time.monotonic()
    try:
        with opener.open(url, timeout=30) as reply:
            out[url] = [reply.status, reply.read().decode()]
    except OSError as exc:
        out[url] = [getattr(exc, "code", 0), type(exc).__name__]
    out[url].append(time.monotonic() - started)
for target in ("10.0.2.2", "127.0.0.1"):  # QEMU user networking's host, the host's loopback
    try:
        socket.create_connection((target, int(os.sys.argv[1])), timeout=3).close()
        out[target] = "connected"
    except OSError as exc:
        out[target] = type(exc).__name__
print(json.dumps(out))
"""
"""``python3 -c PROBE PORT URL...`` in the guest: each URL through the proxy (no NO_PROXY),
as ``[status, body or error, seconds]``; and a direct TCP connection to ``PORT`` at QEMU user
networking's host address and at loopback."""


def _click_and_type(user: User, sandbox_id: str) -> dict[str, object]:
    """What the guest's recorder window received from :data:`INPUT`, run as ``user``."""
    for name, text in (("recorder.py", RECORDER_SOURCE.read_text()), ("record.py", RECORD)):
        (user.home / name).write_text(text)
        (user.home / name).chmod(0o644)
    python = str(user.home / "venv" / "bin" / "python")
    paths = [str(user.home / "recorder.py"), str(user.home / "record.py")]
    started = time.monotonic()
    done = user.run(python, "-c", INPUT, sandbox_id, *paths, json.dumps(RECORDER_BOX), TYPED)
    print(f"[session user] click and type: {time.monotonic() - started:.1f} s", flush=True)
    assert done.returncode == 0, done.stderr
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


def _view_servers_of(uid: int) -> list[int]:
    """Pids of ``uid``'s live-view servers (any sandbox)."""
    found = []
    for pid in _pids_of(uid):
        with contextlib.suppress(OSError):
            if SERVER_MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def _view_size(user: User, sandbox_id: str) -> tuple[int, int]:
    """The desktop size an RFB session through the user's own view server reports (``cubicle
    view`` as ``user``: their server, their VM's view socket)."""
    started = time.monotonic()
    view = user.cubicle("view", sandbox_id, "--json")
    assert view.returncode == 0, view.stderr
    url = json.loads(view.stdout)["url"]
    port = int(url.split(":")[2].split("/")[0])
    with rfb_session(port, session_cookie_for(url)) as session:
        size = session.size
    print(f"[session user] view: {time.monotonic() - started:.1f} s", flush=True)
    return size


def _proxy_lines(logs: str) -> list[dict[str, Any]]:
    """The egress proxy's JSON lines of ``cubicle logs`` (after its ``--- egress proxy ---``)."""
    _, _, proxy = logs.partition("--- egress proxy ---")
    return [json.loads(line) for line in proxy.splitlines() if line.startswith("{")]


@contextlib.contextmanager
def _udp_listener() -> Iterator[socket.socket]:
    """A UDP socket on every IPv4 address of the host (an ephemeral port), non-blocking: what
    arrived is read after the guest's probe."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", 0))  # every address: the guest must find none that reaches it
        sock.setblocking(False)
        yield sock


def _received(sock: socket.socket) -> list[bytes]:
    got = []
    with contextlib.suppress(BlockingIOError):
        while True:
            got.append(sock.recv(2048))
    return got


def _attacks(user: User, sandbox_id: str, ports: list[int], udp_port: int) -> None:
    """The network attacks of the root tests, from the user's guest: direct TCP to the host's
    addresses, QEMU user networking's host, the metadata address, the guest's gateway (it has
    none), IPv6 loopback and link-local, on every port of ``ports``; DNS; UDP to the host. None
    connects, nothing resolves, no datagram arrives (a host socket on ``udp_port`` listens)."""
    hosts = [*host_addresses(), QEMU_SLIRP_HOST, "169.254.169.254", "GATEWAY"]
    targets = [f"{host}:{port}" for host in hosts for port in ports]
    targets += [f"fe80::1:{ports[0]}", "169.254.169.254:80"]
    direct = user.cubicle("exec", sandbox_id, "--", "python3", "-c", DIRECT_PROBE, *targets)
    assert direct.returncode == 0, direct.stderr
    seen = json.loads(direct.stdout)
    assert [t for t in targets if seen[t] == "connected"] == [], seen
    assert seen["dns"] != "resolved" and seen["gateway"] is None, seen
    udp = [f"{host}:{udp_port}" for host in [*host_addresses(), QEMU_SLIRP_HOST]]
    sent = user.cubicle("exec", sandbox_id, "--", "python3", "-c", UDP_PROBE, *udp)
    assert sent.returncode == 0, sent.stderr
    assert [t for t, result in json.loads(sent.stdout).items() if result == "sent"] == [], sent


def _proxy_reachable_by(sandbox_id: str, run: Path) -> dict[str, str]:
    """Who could reach the sandbox's egress proxy besides its guest: the TCP/UDP sockets it holds
    (another sandbox, anything on the network) and whether ``nobody`` (another user) connects to
    its channel socket. ``run``: the user's run folders (``<their VM home>/run``)."""
    pids = [pid for pid, label in vm_network._proxy_processes(run.parent) if label == sandbox_id]
    if len(pids) != 1:  # say what the run folder recorded of its proxy, and what runs as it
        record = json.loads((run / sandbox_id / "egress.json").read_text())
        status = Path(f"/proc/{record['pid']}/status").read_text().splitlines()
        state = [line for line in status if line.startswith(("State", "PPid"))]
        ppid = int(state[-1].split()[-1])
        parent = Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0")[:4]
        log = (run / sandbox_id / "egress.log").read_text()[-1500:]
        raise AssertionError(f"no proxy of {sandbox_id}: {pids}; {state}; {parent}; {log}")
    inet = socket_inodes(pids[0]) & inet_socket_inodes()
    channel = run / sandbox_id / vm_network.CHANNEL_SOCKET
    nobody = as_nobody("/usr/bin/python3", "-I", "-c", NOBODY_CONNECT, str(channel))
    return {"inet sockets": ",".join(sorted(inet)), "nobody": nobody.stdout.decode().strip()}


def _probe(
    user: User, network: list[str], direct: int, urls: list[str], root: VmProvider
) -> tuple[dict[str, Any], set[str], list[dict[str, Any]]]:
    """Up a sandbox with ``--network NETWORK...`` as ``user``, let ``root``'s gc run (it must
    leave the user's sandbox and its proxy alone), run :data:`PROBE` in it (direct connections
    to port ``direct``) and :func:`_attacks`, down it; what the probe saw (no NIC, nothing
    connected directly, the proxy reachable by nothing else: checked here), the host's network
    lines while it ran and the proxy's log lines."""
    up = user.cubicle("up", "--backend", "vm", "--network", *network)
    assert up.returncode == 0, up.stderr
    sandbox_id = up.stdout.strip()
    try:
        assert sandbox_id not in root.gc()  # another user's gc (root's) is not theirs
        argv = ["python3", "-c", PROBE, str(direct), *urls]
        probe = user.cubicle("exec", sandbox_id, "--", *argv)
        logs = user.cubicle("logs", sandbox_id)  # console and proxy log, for failures
        assert probe.returncode == 0, (probe.stderr, logs.stdout[-6000:])
        reachable = _proxy_reachable_by(sandbox_id, user.home / ".cache/cubicle/vm/run")
        with _udp_listener() as udp:
            _attacks(user, sandbox_id, [direct], udp.getsockname()[1])
            datagrams = _received(udp)
        during = _host_network_lines()
    finally:
        down = user.cubicle("down", sandbox_id)
    assert down.returncode == 0, down.stderr
    seen: dict[str, Any] = json.loads(probe.stdout)
    assert seen["interfaces"] == ["lo"], seen  # no network card: the proxy is the only way out
    assert "connected" not in (seen[QEMU_SLIRP_HOST], seen["127.0.0.1"]), seen
    assert datagrams == []
    assert reachable == {"inet sockets": "", "nobody": "PermissionError"}, reachable
    return seen, during, _proxy_lines(logs.stdout)


def test_a_normal_user_runs_none_allow_open_and_ask_sandboxes_over_their_session(
    session_user: User, vm_provider: VmProvider
) -> None:
    before = _host_network_lines()
    doctor = session_user.cubicle("doctor", "--backend", "vm")
    # PATH has no sbin, yet the tools there are found, and doctor says where
    assert "found at /usr/sbin/iptables" in doctor.stdout + doctor.stderr, doctor
    assert "qemu:///session" in doctor.stdout + doctor.stderr, doctor
    up = session_user.cubicle("up", "--backend", "vm")
    assert up.returncode == 0, up.stderr
    plain = up.stdout.strip()
    try:
        shot = session_user.home / "shot.png"
        taken = session_user.cubicle("screenshot", plain, "-o", str(shot))
        assert taken.returncode == 0, taken.stderr
        assert shot.read_bytes().startswith(b"\x89PNG")
        whoami = session_user.cubicle("exec", plain, "--", "id", "-un")
        assert (whoami.returncode, whoami.stdout.strip()) == (0, "cubicle"), whoami.stderr
        listed = session_user.cubicle("ls", "--json")  # this user's sandboxes, in their session
        assert plain in listed.stdout, listed.stderr
        with _udp_listener() as udp, http_server("none", "127.0.0.1") as service:
            _attacks(session_user, plain, [service.port], udp.getsockname()[1])
            assert _received(udp) == [] and service.paths == []
        inputs = _click_and_type(session_user, plain)
        viewed = _view_size(session_user, plain)
    finally:
        down = session_user.cubicle("down", plain)
    assert down.returncode == 0, down.stderr
    assert viewed == (1280, 800)  # the live view, over the view channel of the user's own VM
    assert _view_servers_of(session_user.uid) == [], "down left the user's view server running"
    host = host_addresses()[0]  # a private address of the host (ask: needs one not loopback)
    # XTEST: the click lands at the exact pixel of a real window, the text arrives byte-exact
    assert inputs == {"press": [1, 237, 171, 337, 251], "text": TYPED}, inputs
    with (
        http_server("allowed", "127.0.0.1") as allowed,
        http_server("other", "127.0.0.1") as other,
        http_server("held", host) as held,
    ):
        loopback = [f"http://127.0.0.1:{allowed.port}/ok", f"http://127.0.0.1:{other.port}/no"]
        allow, during, _ = _probe(
            session_user, [f"allow:127.0.0.1:{allowed.port}"], other.port, loopback, vm_provider
        )
        assert allow[loopback[0]][:2] == [200, "allowed"], allow
        assert allow[loopback[1]][0] == 403, allow
        assert allowed.paths == ["/ok"] and other.paths == []
        # open without a bridge is the proxy with nothing blocked: the address guard keeps the
        # host's loopback out, however it is named (QEMU's user network would show it at 10.0.2.2)
        names = ["127.0.0.1", "localhost", QEMU_SLIRP_HOST]
        named = [f"http://{name}:{other.port}/open" for name in names]
        opened, _, opened_log = _probe(session_user, ["open"], other.port, named, vm_provider)
        for url in named:
            assert opened[url][0] in (403, 502), (url, opened)
        assert other.paths == [] and allowed.paths == ["/ok"]
        # each request went to the proxy, which decided on it (never around it)
        decided = {line["host"] for line in opened_log if line.get("port") == other.port}
        assert decided >= set(names), opened_log
        # ask: nobody answers, so the proxy holds the request for the ask timeout, then refuses
        # it; the host's address is private, so the user names it internal (else none is asked)
        asked = f"http://{host}:{held.port}/held"
        ask = ["ask:", "--ask-timeout", str(ASK_TIMEOUT_S), "--allow-internal", f"{host}/32"]
        waited, _, asked_log = _probe(session_user, ask, other.port, [asked], vm_provider)
        assert waited[asked][0] == 403, waited
        assert waited[asked][2] >= ASK_TIMEOUT_S, waited  # held, not refused at once
        assert held.paths == []
        events = [(x["event"], x["origin"]) for x in asked_log if "event" in x and "origin" in x]
        origin = f"http://{host}:{held.port}"
        assert events == [("question", origin), ("answer", origin)], asked_log
        answers = [(x["answer"], x["by"]) for x in asked_log if x.get("event") == "answer"]
        assert answers == [("timeout", "timeout")], asked_log
    # nothing of either sandbox is left in the user's session or home
    left = session_user.run("virsh", "-c", "qemu:///session", "list", "--all", "--name")
    assert left.returncode == 0, left.stderr
    assert left.stdout.split() == []  # no domain, running or defined
    run = session_user.home / ".cache" / "cubicle" / "vm" / "run"
    assert sorted(p.name for p in run.iterdir()) == []
    qemus = [
        pid
        for pid in _pids_of(session_user.uid)
        if b"qemu-system" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert qemus == []
    # no firewall rule and no network link appeared at any time (during: allow's sandbox up)
    assert {line for line in during - before if "cbvm-" in line or "cubicle-vm-" in line} == set()
    after = _host_network_lines()
    assert {line for line in after - before if "cbvm-" in line or "cubicle-vm-" in line} == set()
