"""A normal user runs VM sandboxes: no sudo, no capability, in no group but their own, with the
environment a login gets (PATH without /usr/sbin and /sbin), over their own ``qemu:///session``
daemon, from the built wheel installed into a venv of theirs with the system Python, booting the
image root built (found in the shared folder, or pinned by path).

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
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import image as vm_image
from cubicle_guest.waiting import Deadline, poll
from tests.orchestrator.support import http_server
from tests.test_import_cycles import REPO

pytestmark = [pytest.mark.vm, pytest.mark.slow]

SYSTEM_PYTHON = Path("/usr/bin/python3")
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
UV_INSTALL = [sys.executable, "-m", "uv", "pip", "install", "--quiet"]
LOCK = REPO / "requirements" / "host.txt"


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


PROBE = """
import json, os, urllib.request
proxy = os.environ["http_proxy"]
for name in ("no_proxy", "NO_PROXY"):
    os.environ.pop(name, None)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
out = {"proxy": proxy, "interfaces": sorted(os.listdir("/sys/class/net"))}
for url in os.sys.argv[1:]:
    try:
        with opener.open(url, timeout=15) as reply:
            out[url] = [reply.status, reply.read().decode()]
    except OSError as exc:
        out[url] = [getattr(exc, "code", 0), type(exc).__name__]
print(json.dumps(out))
"""


def test_a_normal_user_runs_none_and_allow_sandboxes_over_their_session(
    session_user: User,
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
    finally:
        down = session_user.cubicle("down", plain)
    assert down.returncode == 0, down.stderr
    with http_server("allowed", "127.0.0.1") as allowed, http_server("other", "127.0.0.1") as other:
        up = session_user.cubicle(
            "up", "--backend", "vm", "--network", f"allow:127.0.0.1:{allowed.port}"
        )
        assert up.returncode == 0, up.stderr
        proxied = up.stdout.strip()
        try:
            urls = [f"http://127.0.0.1:{allowed.port}/ok", f"http://127.0.0.1:{other.port}/no"]
            probe = session_user.cubicle("exec", proxied, "--", "python3", "-c", PROBE, *urls)
            during = _host_network_lines()
            logs = session_user.cubicle("logs", proxied)  # console and proxy log, for failures
        finally:
            down = session_user.cubicle("down", proxied)
        assert down.returncode == 0, down.stderr
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["interfaces"] == ["lo"]
    assert seen[urls[0]] == [200, "allowed"], (seen, logs.stdout[-6000:])
    assert seen[urls[1]][0] == 403, seen
    assert allowed.paths == ["/ok"] and other.paths == []
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
    # no firewall rule and no network link appeared at any time
    assert {line for line in during - before if "cbvm-" in line or "cubicle-vm-" in line} == set()
    after = _host_network_lines()
    assert {line for line in after - before if "cbvm-" in line or "cubicle-vm-" in line} == set()
