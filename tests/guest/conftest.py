"""Fixtures for the guest agent tests: one private Xvfb and one real agent per module, and a
fresh recorder window per test. Everything is stopped by the fixture that started it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle_guest.client import AgentClient
from tests.support.agent import RunningAgent, start_agent
from tests.support.recorder import Recorder
from tests.support.signin_site import Site
from tests.support.xvfb import Xvfb

WIDTH, HEIGHT = 1280, 800


@pytest.fixture(scope="module")
def xserver() -> Iterator[Xvfb]:
    with Xvfb(WIDTH, HEIGHT) as server:
        yield server


@pytest.fixture(scope="module")
def agent(xserver: Xvfb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    directory: Path = tmp_path_factory.mktemp("agent")
    with start_agent(xserver.display, directory) as running:
        yield running
        assert running.alive(), f"agent died during the tests:\n{running.log_text()[-3000:]}"


@pytest.fixture(scope="module")
def client(agent: RunningAgent) -> Iterator[AgentClient]:
    with agent.client() as connected:
        yield connected


@pytest.fixture
def recorder(xserver: Xvfb, client: AgentClient) -> Iterator[Recorder]:
    with Recorder(xserver.display) as rec:
        yield rec
    client.release_all()


@pytest.fixture
def site() -> Iterator[Site]:
    """A local sign-in site (:class:`tests.support.signin_site.Site`) with no pages yet, closed
    after the test."""
    served = Site()
    try:
        yield served
    finally:
        served.close()
