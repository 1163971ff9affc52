"""Sandboxes on a Docker engine cubicle shares no filesystem with, over tcp:// (TLS) and ssh://.

The engine is the box of :mod:`tests.remote.enginebox`: another dockerd in its own network
namespace, reachable only at its veth address. What is proven, per transport: the image arrives
through the API; ``up`` → ``ls`` → ``screenshot`` → ``exec`` → ``logs`` → ``down`` through the
CLI, the id leading to its engine with no ``--engine``; network ``none`` and ``allow:`` (the
egress proxy runs on the box); the agent over the relayed exec stream with large frames both
ways; ``gc`` on the box (owner pids judged only for this host); and nothing of any sandbox is
left on the box — nor on the local engine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from PIL import Image

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.providers.docker.engine import EngineBook
from cubicle.orchestrator.providers.docker.naming import guest_name
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.support import http_server, leftovers
from tests.orchestrator.test_docker_network import PROXY_PROBE, run_probe
from tests.remote.conftest import Remote
from tests.remote.enginebox import EngineBox, make_tls
from tests.support.cli import run_cli
from tests.support.guest_probes import DIRECT_PROBE

pytestmark = [pytest.mark.docker, pytest.mark.remote, pytest.mark.slow]


def _local_leftovers(sandbox_id: str) -> list[str]:
    local = docker.from_env()
    try:
        return leftovers(local, {L.SANDBOX: sandbox_id})
    finally:
        local.close()


def test_cli_lifecycle_on_the_remote_engine(remote: Remote) -> None:
    """up → ls → screenshot → exec → logs → down, through the CLI; only ``up`` names the
    engine: the book leads the other commands to it."""
    up = remote.cli("up", "--engine", remote.url, "--size", "1024x640", "--json")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    sandbox_id = info["id"]
    try:
        assert info["detail"]["engine"] == remote.url
        assert remote.client.containers.get(guest_name(sandbox_id, ready=True)).status == "running"
        assert _local_leftovers(sandbox_id) == []  # nothing of it on this host's engine
        listed = remote.cli("ls", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {row["id"]: row for row in json.loads(listed.stdout)}
        assert rows[sandbox_id]["detail"]["engine"] == remote.url

        shot = remote.box.folder / f"shot-{sandbox_id}.png"
        done = remote.cli("screenshot", sandbox_id, "-o", str(shot))
        assert done.returncode == 0, done.stderr
        image = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
        assert image.size == (1024, 640)
        assert len(image.crop((0, 600, 1024, 640)).getcolors(65536) or []) > 2  # the panel

        done = remote.cli(
            "exec", sandbox_id, "--", "python3", "-c", "import os; print(os.getuid(), 'ok')"
        )
        assert (done.returncode, done.stdout) == (0, "1000 ok\n"), done.stderr
        logs = remote.cli("logs", sandbox_id, "--tail", "20")
        assert logs.returncode == 0 and logs.stdout.strip(), logs.stderr
    finally:
        down = remote.cli("down", sandbox_id)
    assert down.returncode == 0, down.stderr
    assert leftovers(remote.client, {L.SANDBOX: sandbox_id}) == []
    assert EngineBook().lookup(sandbox_id) is None


def test_network_none_and_allow_on_the_remote_engine(on_remote: Remote) -> None:
    """``none``: no route at all; ``allow:``: exactly the allowed origin, through the proxy
    container on the box. The servers listen on this side of the veth pair, the only address
    the box can reach."""
    host = on_remote.box.host_ip
    with (
        http_server("allowed", address=host) as allowed,
        http_server("other", address=host) as other,
        Sandbox.create(network="none", screen=(800, 600)) as closed,
    ):
        seen = run_probe(closed, DIRECT_PROBE, f"{host}:{allowed.port}")
        assert str(seen[f"{host}:{allowed.port}"]).startswith("OSError: [Errno 101]"), seen
        assert allowed.paths == []
        with Sandbox.create(network=f"allow:{host}:{allowed.port}", screen=(800, 600)) as open_:
            assert open_.info.detail["engine"] == on_remote.url
            direct = run_probe(open_, DIRECT_PROBE, f"{host}:{allowed.port}")
            urls = [f"http://{host}:{allowed.port}/ok", f"http://{host}:{other.port}/no"]
            via = run_probe(open_, PROXY_PROBE, *urls)
            proxies = on_remote.client.containers.list(
                filters={"label": [f"{L.SANDBOX}={open_.id}", f"{L.ROLE}=egress"]}
            )
            assert len(proxies) == 1  # the proxy runs on the box
        ids = (closed.id, open_.id)
    assert direct[f"{host}:{allowed.port}"] != "connected", direct
    assert via[urls[0]] == [200, "allowed"], via
    assert via[urls[1]][0] == 403, via  # type: ignore[index]
    assert allowed.paths == ["/ok"] and other.paths == []
    for sandbox_id in ids:
        assert leftovers(on_remote.client, {L.SANDBOX: sandbox_id}) == []


def test_agent_over_the_relayed_exec_stream(on_remote: Remote) -> None:
    """A driver's connection over TLS/ssh: large frames both ways arrive whole, in order, and
    closing the connection ends the bridge in the guest."""
    with Sandbox.create(screen=(1280, 800)) as sandbox:
        with sandbox.connect() as agent:
            for _ in range(3):
                reply = agent.screenshot()
                image = Image.open(io.BytesIO(reply.blob))
                assert image.size == (1280, 800)
            text = "Ünïcødé ✓ " * 6000  # ~100 kB in one argument (under the kernel's 128 kB)
            done = sandbox.exec(["python3", "-c", "import sys; print(sys.argv[1][::-1])", text])
            assert done.stdout == text[::-1] + "\n", done.stderr
            big = sandbox.exec(["python3", "-c", "print('x' * 3_000_000)"])
            assert big.stdout_truncated, len(big.stdout)
            assert set(big.stdout) == {"x"} and len(big.stdout) > 1_000_000
        bridges = sandbox.provider.docker_exec(  # type: ignore[attr-defined]
            sandbox.id, ["pgrep", "-f", "cubicle_guest.bridge"]
        )
        deadline = time.monotonic() + 5
        while bridges.stdout.strip() and time.monotonic() < deadline:
            bridges = sandbox.provider.docker_exec(  # type: ignore[attr-defined]
                sandbox.id, ["pgrep", "-f", "cubicle_guest.bridge"]
            )
        assert bridges.stdout.strip() == "", "a bridge outlived its connection"


CREATE_AND_WAIT = """
import sys, time
from cubicle.orchestrator.sandbox import Sandbox
sandbox = Sandbox.create(screen=(800, 600))
print(sandbox.id, flush=True)
time.sleep(600)
"""


def test_gc_on_the_remote_engine_judges_only_this_hosts_pids(on_tls: Remote) -> None:
    """An owner killed on this host: gc removes its sandbox from the box. A sandbox stamped by
    an owner on another host, whose pid does not exist here: gc keeps it (only its expiry
    decides)."""
    on_remote = on_tls
    with subprocess.Popen(
        [sys.executable, "-c", CREATE_AND_WAIT], stdout=subprocess.PIPE, text=True
    ) as owner:
        try:
            assert owner.stdout is not None
            orphan = owner.stdout.readline().strip()
            assert orphan.startswith("dk-"), orphan
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.wait()
    client = on_remote.client
    elsewhere = L.create_labels(
        "dk-0000e15e00",
        "guest",
        owner=L.Owner(owner.pid, 1, "another-host.example"),  # a dead pid, but not ours
        ttl_s=3600,
        network="none",
        screen=(800, 600),
    )
    foreign = client.containers.create(
        os.environ["CUBICLE_DOCKER_IMAGE"],
        entrypoint=["true"],
        name=guest_name("dk-0000e15e00", ready=True),
        labels=elsewhere,
        network_mode="none",
    )
    try:
        # --engine: gc must not judge the shared local engine of this machine
        done = on_remote.cli("gc", "--engine", on_remote.url)
        assert done.returncode == 0, done.stderr
        assert orphan in done.stdout.split()
        assert leftovers(client, {L.SANDBOX: orphan}) == []
        assert "dk-0000e15e00" not in done.stdout
        foreign.reload()  # still there
    finally:
        DockerProvider(client).destroy("dk-0000e15e00")
    assert EngineBook().lookup(orphan) is None


def test_an_unknown_ssh_host_key_or_a_foreign_ca_is_refused(box: EngineBox, tmp_path: Path) -> None:
    """The box answers, but this client cannot verify it: nothing is created, exit 3."""
    home = tmp_path / "home"
    shutil.copytree(box.ssh_home, home)
    (home / ".ssh" / "known_hosts").write_text("")  # the key is not known here
    done = run_cli("up", "--engine", box.ssh_url, env={"HOME": str(home)})
    assert done.returncode == 3, done.stderr
    assert "not found in known_hosts" in done.stderr
    other = make_tls(tmp_path / "other-pki", box.box_ip)  # a CA the engine never saw
    done = run_cli("up", "--engine", box.tcp_url, env={"DOCKER_CERT_PATH": str(other.client_dir)})
    assert done.returncode == 3, done.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in done.stderr
