"""One sandbox never takes the whole host: a default CPU limit, and a pids limit a fork bomb hits.

As of eff2174 the default CPU limit was the whole host (2 cores here) and a fork bomb in one
sandbox drove the host's load to 226.
"""

from __future__ import annotations

import json
import threading
import time

import docker
import pytest

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.sandbox import Sandbox
from tests.attack.cgroups import cgroup_file, cpu_seconds, stat_field
from tests.orchestrator.conftest import Tracker

pytestmark = [pytest.mark.attack]

CPUS_ENV = "CUBICLE_CPUS"

BURN = """
import json, os, resource, sys, time
burn_s = float(sys.argv[1])
start = time.monotonic()
children = []
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        end = time.monotonic() + burn_s
        while time.monotonic() < end:
            pass
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
wall = time.monotonic() - start
print(json.dumps({"cores": (usage.ru_utime + usage.ru_stime) / wall}))
"""

BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def _burn(sandbox: Sandbox, engine: docker.DockerClient, workers: int) -> tuple[float, int]:
    """Cores the guest's busy loops got, and how many CFS periods the cgroup was throttled."""
    container = engine.containers.get(f"cubicle-{sandbox.id}")
    stat = cgroup_file(container, "cpu", "cpu.stat")
    throttled = stat_field(stat, "nr_throttled")
    done = sandbox.exec(["python3", "-c", BURN, "1.5", str(workers)])
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout)["cores"], stat_field(stat, "nr_throttled") - throttled


@pytest.mark.docker
def test_the_default_cpu_limit_is_one_core(
    sandboxes: Tracker, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CPUS_ENV, raising=False)
    sandbox = sandboxes.create()
    cores, throttled = _burn(sandbox, engine, workers=2)
    assert throttled > 0, "two busy loops were never throttled: no CPU limit below 2 cores"
    assert cores < 1.2, f"two busy loops got {cores:.2f} cores"


@pytest.mark.docker
def test_the_cpu_limit_is_configurable(
    sandboxes: Tracker, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPUS_ENV, "0.5")
    assert SandboxSpec().cpus == 0.5
    sandbox = sandboxes.create()
    cores, throttled = _burn(sandbox, engine, workers=1)
    assert throttled > 0 and cores < 0.65, f"one busy loop got {cores:.2f} cores"


@pytest.mark.parametrize("value", ["lots", "0", "-1", "inf", "nan"])
def test_a_bad_cpu_setting_is_refused_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPUS_ENV, value)
    with pytest.raises(ConfigError, match=CPUS_ENV):
        SandboxSpec()


@pytest.mark.docker
@pytest.mark.slow
def test_a_fork_bomb_stops_at_the_pids_limit(
    sandboxes: Tracker, engine: docker.DockerClient
) -> None:
    sandbox = sandboxes.create()
    container = engine.containers.get(f"cubicle-{sandbox.id}")
    pids = cgroup_file(container, "pids", "pids.current")
    limit = SandboxSpec().pids_limit
    outcome: list[object] = []
    bomb = threading.Thread(
        target=lambda: outcome.append(sandbox.exec(["python3", "-c", BOMB], timeout=6))
    )
    bomb.start()
    peak = 0
    before, started = cpu_seconds(container), time.monotonic()
    while bomb.is_alive():
        peak = max(peak, int(pids.read_text()))
        time.sleep(0.05)
    cores = (cpu_seconds(container) - before) / (time.monotonic() - started)
    bomb.join()
    assert limit * 0.9 < peak <= limit, f"peak {peak} processes, limit {limit}"
    assert cores < 1.2, f"the bomb took {cores:.2f} cores of the host"
    result = outcome[0]
    assert getattr(result, "timed_out", False) is True
    # the exec's timeout killed the whole process group: the sandbox is usable again
    assert sandbox.exec(["true"]).exit_code == 0
    assert int(pids.read_text()) < 100
