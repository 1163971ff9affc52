"""Fixtures of the ``cubicle serve`` tests: a real server subprocess and real openai clients.

``server`` starts ``python -m cubicle.orchestrator.cli serve --port 0`` with a private data folder
and a known token (:func:`tests.support.serve_process.start_server`), waits for its ``base_url``
line, and stops it with SIGTERM at teardown; then no container, network or volume owned by that
server process may remain (checked by label).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.view_servers import DIR_ENV
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.support.serve_process import REPO, TOKEN, Server, start_server

__all__ = [
    "REPO",
    "TOKEN",
    "Server",
    "api_server",
    "engine",
    "module_server",
    "no_session_left",
    "server",
    "serving",
    "start_server",
]


@contextmanager
def serving(engine: docker.DockerClient, folder: Path) -> Iterator[Server]:
    """A server whose data (and live-view servers' state: the console's link) is in ``folder``;
    stopped afterwards, when nothing it owned may remain in the engine."""
    started = start_server(folder / "serve", env={DIR_ENV: str(folder / "view")})
    try:
        yield started
    finally:
        started.stop()
        left = leftovers(engine, {L.OWNER_PID: str(started.process.pid)})
        assert not left, f"cubicle serve left objects behind: {left}"


@pytest.fixture
def server(docker_image: str, engine: docker.DockerClient, tmp_path: Path) -> Iterator[Server]:
    with serving(engine, tmp_path) as started:
        yield started


@pytest.fixture(scope="module")
def module_server(
    docker_image: str, engine: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One server for the tests of a module whose every test removes the sessions it made (the
    start of a server is seconds: paid once). After each test it owns no session and no
    sandbox: :func:`no_session_left` (autouse it in the module) checks that and cleans up."""
    with serving(engine, tmp_path_factory.mktemp("shared")) as started:
        yield started


@pytest.fixture
def no_session_left(module_server: Server, engine: docker.DockerClient) -> Iterator[None]:
    """After the test, ``module_server`` has no session and owns nothing in the engine; whatever
    a failed test left is deleted first, so the next test starts clean."""
    yield
    client = module_server.client()
    left = [s.id for s in client.beta.agents.sessions.list(limit=100)]
    for session_id in left:
        client.beta.agents.sessions.delete(session_id)
    owned = leftovers(engine, {L.OWNER_PID: str(module_server.process.pid)})
    assert (left, owned) == ([], []), "the test left sessions or sandboxes behind"


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server for requests that never create a sandbox (errors, auth), one per module."""
    started = start_server(tmp_path_factory.mktemp("serve") / "data")
    try:
        yield started
    finally:
        started.stop()
