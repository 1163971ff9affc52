"""Fixtures for the orchestrator tests against the real Docker engine.

- ``provider``: a :class:`DockerProvider` on the local engine (the image built once per run).
- ``sandboxes``: a tracker; every sandbox a test creates is registered there and destroyed at
  teardown, even when the test fails, and the test fails if any object of it is left.
- At the end of the session, no container/network of a sandbox created by this process (or by a
  child process the tests started) may remain on the engine (checked by label).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.support import leftovers
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
CliRun = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def cli(docker_image: str) -> CliRun:
    """Run ``python -m cubicle.orchestrator.cli ARGS...`` as a subprocess; returns the completed
    process."""

    def run(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    mine = leftovers(client, {L.OWNER_PID: str(os.getpid())})
    client.close()
    assert not mine, f"the orchestrator tests left cubicle objects behind: {mine}"


@pytest.fixture
def provider(docker_image: str, engine: docker.DockerClient) -> DockerProvider:
    return DockerProvider(engine)


class Tracker:
    """Sandbox ids a test created; all destroyed (and checked gone) at teardown."""

    def __init__(self, provider: DockerProvider) -> None:
        self.provider = provider
        self.ids: list[str] = []
        self.handles: list[Sandbox] = []

    def add(self, sandbox: Sandbox | str) -> str:
        if isinstance(sandbox, str):
            self.ids.append(sandbox)
            return sandbox
        self.handles.append(sandbox)
        self.ids.append(sandbox.id)
        return sandbox.id

    def create(self, **kwargs: object) -> Sandbox:
        sandbox = Sandbox.create("docker", **kwargs)  # type: ignore[arg-type]
        self.add(sandbox)
        return sandbox


@pytest.fixture
def sandboxes(provider: DockerProvider, engine: docker.DockerClient) -> Iterator[Tracker]:
    tracker = Tracker(provider)
    yield tracker
    for sandbox in tracker.handles:
        sandbox.destroy()
    for sandbox_id in tracker.ids:
        provider.destroy(sandbox_id)
    left = {i: leftovers(engine, {L.SANDBOX: i}) for i in tracker.ids}
    left = {i: objects for i, objects in left.items() if objects}
    assert not left, f"sandboxes left objects after destroy: {left}"
