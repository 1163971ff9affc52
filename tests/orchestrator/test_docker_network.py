"""Network policies enforced on real containers: ``none``, and ``allow:`` via the egress proxy."""

from __future__ import annotations

import json

import docker
import pytest

from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.conftest import CliRun, Tracker
from tests.orchestrator.support import bridge_gateway, http_server
from tests.support.guest_probes import DIRECT_PROBE

pytestmark = [pytest.mark.docker]


PROXY_PROBE = """
import json, sys, urllib.request
results = {}
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            results[url] = [reply.status, reply.read().decode()]
    except urllib.error.HTTPError as exc:
        results[url] = [exc.code, ""]
    except OSError as exc:
        results[url] = [0, type(exc).__name__ + ": " + str(exc)]
print(json.dumps(results))
"""


def run_probe(sandbox: Sandbox, code: str, *args: str) -> dict[str, object]:
    done = sandbox.exec(["python3", "-c", code, *args], timeout=60)
    assert done.exit_code == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_none_reaches_nothing(sandboxes: Tracker, engine: docker.DockerClient) -> None:
    gateway = bridge_gateway(engine)
    with http_server("host-service") as server:
        sandbox = sandboxes.create(network="none")
        seen = run_probe(
            sandbox, DIRECT_PROBE, f"{gateway}:{server.port}", "1.1.1.1:53", "151.101.2.132:80"
        )
    for target in (f"{gateway}:{server.port}", "1.1.1.1:53", "151.101.2.132:80"):
        assert str(seen[target]).startswith("OSError: [Errno 101] Network is unreachable"), seen
    assert str(seen["dns"]).startswith("gaierror"), seen
    assert server.paths == []


def test_allow_forwards_exactly_the_allowed_origins(
    sandboxes: Tracker, engine: docker.DockerClient
) -> None:
    gateway = bridge_gateway(engine)
    with http_server("allowed") as allowed, http_server("other") as other:
        sandbox = sandboxes.create(network=f"allow:{gateway}:{allowed.port}")
        direct = run_probe(
            sandbox,
            DIRECT_PROBE,
            f"{gateway}:{allowed.port}",
            f"{gateway}:{other.port}",
            "1.1.1.1:53",
        )
        urls = {
            "allowed": f"http://{gateway}:{allowed.port}/ok",
            "other port": f"http://{gateway}:{other.port}/no",
            "suffix": f"http://{gateway}.evil.test:{allowed.port}/no",
            "path": f"http://evil.test/{gateway}:{allowed.port}/no",
            "default port": f"http://{gateway}/no",
            "https tunnel to other port": f"https://{gateway}:{other.port}/no",
        }
        seen = run_probe(sandbox, PROXY_PROBE, *urls.values())
        log = sandbox.provider.egress_log(sandbox.id)
    # no direct route: not to the allowed origin, not to the host, not outside
    for target, outcome in direct.items():
        assert outcome != "connected", (target, direct)
    assert str(direct["dns"]).startswith("gaierror"), direct
    # through the proxy: exactly the allowed origin
    assert seen[urls["allowed"]] == [200, "allowed"]
    for name in ("other port", "suffix", "path", "default port"):
        assert seen[urls[name]][0] == 403, (name, seen)  # type: ignore[index]
    assert "403" in str(seen[urls["https tunnel to other port"]][1]), seen  # type: ignore[index]
    assert allowed.paths == ["/ok"]
    assert other.paths == []
    decisions = [json.loads(line) for line in log.splitlines() if '"decision"' in line]
    allowed_entries = [d for d in decisions if d["decision"] == "allow"]
    refused_entries = [d for d in decisions if d["decision"] == "refuse"]
    assert [(d["host"], d["port"]) for d in allowed_entries] == [(gateway, allowed.port)]
    assert {(d["host"], d["port"]) for d in refused_entries} >= {
        (gateway, other.port),
        (f"{gateway}.evil.test", allowed.port),
        ("evil.test", 80),
        (gateway, 80),
    }


def test_allow_by_name_refuses_look_alikes(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create(network="allow:example.com")
    tricky = [
        "http://example.com.evil.test/",
        "http://evil.test/example.com",
        "http://badexample.com/",  # (sub.example.com is admitted: tests/…/test_docker_ask.py)
        "http://example.com:8080/",
        "http://xn--exmple-cua.com/",  # exämple.com
        "http://example.co/",
        "http://example.com@evil.test/",
    ]
    seen = run_probe(sandbox, PROXY_PROBE, *tricky)
    for url in tricky:
        status = seen[url][0]  # type: ignore[index]
        assert status in (400, 403), (url, seen[url])
    log = sandbox.provider.egress_log(sandbox.id)
    decisions = [json.loads(line) for line in log.splitlines() if '"decision"' in line]
    assert len(decisions) == len(tricky)
    assert all(d["decision"] == "refuse" for d in decisions)


def test_cli_logs_show_the_egress_decisions(sandboxes: Tracker, cli: CliRun) -> None:
    sandbox = sandboxes.create(network="allow:example.com")
    run_probe(sandbox, PROXY_PROBE, "http://evil.test/")
    logs = cli("logs", sandbox.id)
    assert logs.returncode == 0, logs.stderr
    assert "--- egress proxy ---" in logs.stdout
    assert '"decision": "refuse", "method": "GET", "host": "evil.test"' in logs.stdout
