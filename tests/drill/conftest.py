"""Fixtures of the drill tests.

- ``local_desktop``: Xvfb + openbox + the guest agent on this host (needs mousepad, chromium and
  openbox installed: scripts/host-packages/drill.txt); stopped after the test.
- ``fresh_sandbox``: a Docker sandbox of one test (a pixels-only drill leaves the apps the model
  opened running, so each drill run gets its own), destroyed after it.
- ``cubicle_containers``: the cubicle containers a given process created (by label), to prove a
  ``cubicle drill``/``cubicle run`` subprocess left nothing behind.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels
from cubicle.orchestrator.sandbox import Sandbox
from tests.drill.desktop import LocalDesktop, missing_apps

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


@pytest.fixture
def local_desktop(tmp_path: Path) -> Iterator[LocalDesktop]:
    missing = missing_apps()
    if missing:
        pytest.fail(
            f"the local drill desktop needs {', '.join(missing)} "
            "(scripts/ensure-host-packages installs scripts/host-packages/drill.txt)"
        )
    with LocalDesktop(tmp_path / "desktop") as desktop:
        yield desktop


@pytest.fixture
def fresh_sandbox(docker_image: str) -> Iterator[Sandbox]:
    sandbox = Sandbox.create("docker", network="none", screen=(1280, 800))
    try:
        yield sandbox
    finally:
        sandbox.destroy()


@pytest.fixture(scope="session")
def cubicle_containers() -> Iterator[Callable[[int], list[str]]]:
    client = docker.from_env()

    def containers_of(pid: int) -> list[str]:
        found = client.containers.list(all=True, filters={"label": f"{labels.OWNER_PID}={pid}"})
        return [str(c.name) for c in found]

    yield containers_of
    client.close()
