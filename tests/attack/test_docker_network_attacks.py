"""Issue 38 (rows PX2, PX1, LG2) on Docker: nothing of one sandbox shares a network with another
sandbox's objects, a restricted guest reaches nothing of the host except through its proxy, and
nothing a guest writes grows a host-side file without bound.

- PX2: an ``open`` sandbox B tries its neighbour A's (``ask:``) egress proxy on every address it
  has, and A's guest; it reaches none (Docker isolates user-defined bridge networks from one
  another), and A's ask queue stays empty.
- PX1: a ``block:`` guest reaches no host address directly (a listener of the test on 0.0.0.0,
  tried on every gateway address of the engine's networks); the ``open`` guest's reach is
  documented in docs/security.md ("Docker sandboxes: networks and logs").
- LG2: a guest writing 40 MB to its container's stdout leaves a host-side log file under the cap,
  and every container of a sandbox (guest and proxy) has a capped log; ``cubicle logs`` still works.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.origin_questions import OriginQuestions
from cubicle.orchestrator.providers.docker.container_logs import LOG_MAX_FILES, LOG_MAX_SIZE_MB
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.waiting import Deadline, poll
from tests.orchestrator.conftest import Tracker
from tests.orchestrator.support import http_server

pytestmark = [pytest.mark.attack, pytest.mark.docker]

PROBE = """
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor

def attempt(target):
    host, port = target.rsplit(":", 1)
    try:
        sock = socket.create_connection((host, int(port)), timeout=2)
    except OSError as exc:
        return type(exc).__name__ + ": " + str(exc)
    try:
        sock.sendall(b"CONNECT x.example:443 HTTP/1.1\\r\\nHost: x.example:443\\r\\n\\r\\n")
        sock.settimeout(2)
        try:
            head = sock.recv(200)
        except OSError:
            head = b""
        return "connected " + head.decode("latin-1")
    finally:
        sock.close()

with ThreadPoolExecutor(len(sys.argv)) as pool:
    print(json.dumps(dict(zip(sys.argv[1:], pool.map(attempt, sys.argv[1:])))))
"""
"""``python3 -c PROBE HOST:PORT ...``: connect to each target at once (2 s each), send a
``CONNECT x.example:443`` on what connects; prints ``{target: "connected …" | "<error>"}``."""


def probe(sandbox: Sandbox, targets: list[str]) -> dict[str, str]:
    done = sandbox.exec(["python3", "-c", PROBE, *targets], timeout=30)
    assert done.exit_code == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    return result


def addresses(engine: docker.DockerClient, sandbox_id: str, role: str) -> list[str]:
    """Every IPv4 address the sandbox's container of ``role`` has, on any network."""
    [container] = engine.containers.list(
        all=True, filters={"label": [f"{L.SANDBOX}={sandbox_id}", f"{L.ROLE}={role}"]}
    )
    networks = container.attrs["NetworkSettings"]["Networks"]
    return [n["IPAddress"] for n in networks.values() if n.get("IPAddress")]


def host_gateways(engine: docker.DockerClient) -> list[str]:
    """The host's address on every bridge network of the engine (the default bridge's included)."""
    found: list[str] = []
    for network in engine.networks.list(filters={"driver": "bridge"}):
        for config in network.attrs.get("IPAM", {}).get("Config") or []:
            gateway = config.get("Gateway")
            if gateway and ":" not in gateway:
                found.append(gateway)
    bridge = engine.networks.get("bridge").attrs["IPAM"]["Config"][0]
    if not bridge.get("Gateway"):  # the default bridge often omits it: the subnet's first address
        found.append(bridge["Subnet"].split("/")[0].rsplit(".", 1)[0] + ".1")
    return sorted(set(found))


@pytest.fixture
def pair(sandboxes: Tracker) -> Iterator[tuple[Sandbox, Sandbox]]:
    """A (``ask:``, nothing allowed) and B (``open``), created at once."""
    with ThreadPoolExecutor(2) as pool:
        made = [pool.submit(sandboxes.create, network=n) for n in ("ask:", "open")]
    yield made[0].result(), made[1].result()


GUEST_SERVER = """
import socket, sys, time
server = socket.create_server(("0.0.0.0", 4242))
server.settimeout(0.2)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    try:
        peer, _ = server.accept()
    except OSError:
        continue
    peer.sendall(b"A-GUEST-TOKEN")
    peer.close()
"""
"""``python3 -c GUEST_SERVER SECONDS``: answer every connection to port 4242 with a token."""


def test_px2_an_open_sandbox_reaches_neither_the_proxy_nor_the_guest_of_another(
    engine: docker.DockerClient, pair: tuple[Sandbox, Sandbox]
) -> None:
    asking, opened = pair
    proxy = [f"{ip}:3128" for ip in addresses(engine, asking.id, "egress")]
    guest = [f"{ip}:4242" for ip in addresses(engine, asking.id, "guest")]
    assert proxy and len(guest) == 1, (proxy, guest)
    with ThreadPoolExecutor(1) as pool:
        serving = pool.submit(asking.exec, ["python3", "-c", GUEST_SERVER, "4"], timeout=30)
        for _ in poll(Deadline(3), 0.1):  # A's own guest is served (the server listens)
            if probe(asking, ["127.0.0.1:4242"])["127.0.0.1:4242"].endswith("A-GUEST-TOKEN"):
                break
        else:
            pytest.fail("the server in A's guest never answered")
        seen = probe(opened, proxy + guest)
        assert serving.result().exit_code == 0
    assert "A-GUEST-TOKEN" not in json.dumps(seen), seen
    # a CONNECT that reached A's proxy raises a question there (and logs it)
    with OriginQuestions.open(asking, timeout=10) as questions:
        assert questions.next(timeout=1) is None, seen
    assert "x.example" not in asking.provider.egress_log(asking.id), seen
    # the cause: nothing of one sandbox shares a network with anything of the other
    networks = {
        n["NetworkID"]: sandbox.id
        for sandbox in pair
        for c in engine.containers.list(all=True, filters={"label": f"{L.SANDBOX}={sandbox.id}"})
        for n in c.attrs["NetworkSettings"]["Networks"].values()
    }
    shared = [
        n.name
        for n in engine.networks.list(greedy=True)
        if n.id in networks and len({label_of(engine, c) for c in n.attrs["Containers"]}) > 1
    ]
    assert shared == []


def label_of(engine: docker.DockerClient, container_id: str) -> str:
    return str(engine.containers.get(container_id).labels.get(L.SANDBOX))


def test_px1_a_block_guest_reaches_nothing_of_the_host_directly(
    engine: docker.DockerClient, sandboxes: Tracker
) -> None:
    with http_server("host-service") as server:
        sandbox = sandboxes.create(network="block:blocked.example")
        targets = [f"{gateway}:{server.port}" for gateway in host_gateways(engine)]
        seen = probe(sandbox, targets)
    assert not [result for result in seen.values() if result.startswith("connected")], seen
    assert server.paths == []


def test_lg2_a_guest_cannot_grow_its_container_log_past_the_cap(
    engine: docker.DockerClient, sandboxes: Tracker
) -> None:
    sandbox = sandboxes.create(network="allow:example.com")
    line = "x" * 1023
    writer = (
        f"import os\nfd = os.open('/proc/1/fd/1', os.O_WRONLY)\nchunk = ({line!r} + '\\n') * 1024\n"
        "for _ in range(40):\n    os.write(fd, chunk.encode())\n"
    )
    done = sandbox.exec(["python3", "-c", writer], timeout=60)
    assert done.exit_code == 0, done.stderr
    cap = LOG_MAX_SIZE_MB * LOG_MAX_FILES * 2**20
    [guest] = engine.containers.list(
        all=True, filters={"label": [f"{L.SANDBOX}={sandbox.id}", f"{L.ROLE}=guest"]}
    )
    log_path = Path(guest.attrs["LogPath"])
    files = [log_path.parent / name for name in os.listdir(log_path.parent)]
    written = sum(path.stat().st_size for path in files if path.name.startswith(log_path.name))
    assert 0 < written <= cap + 2**20, written
    for container in engine.containers.list(
        all=True, filters={"label": f"{L.SANDBOX}={sandbox.id}"}
    ):
        config = container.attrs["HostConfig"]["LogConfig"]
        assert config["Type"] == "json-file", config
        assert config["Config"] == {
            "max-size": f"{LOG_MAX_SIZE_MB}m",
            "max-file": str(LOG_MAX_FILES),
        }, (container.name, config)
    assert sandbox.logs(tail=3).strip().endswith(line)  # `cubicle logs` still reads the log
