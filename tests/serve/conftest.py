"""Fixtures of the ``cubicle serve`` tests: a real server subprocess and real openai clients.

``server`` starts ``python -m cubicle.orchestrator.cli serve --port 0`` with a private data folder
and a known token (:func:`tests.support.serve_process.start_server`), waits for its ``base_url``
line, and stops it with SIGTERM at teardown; then no container, network or volume owned by that
server process may remain (checked by label).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.view_servers import DIR_ENV
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.support.serve_process import REPO, TOKEN, Server, start_server

__all__ = ["REPO", "TOKEN", "Server", "api_server", "engine", "server", "start_server"]


@pytest.fixture
def server(docker_image: str, engine: docker.DockerClient, tmp_path: Path) -> Iterator[Server]:
    # live-view servers (the console's link) keep their state in this test's folder
    started = start_server(tmp_path / "serve", env={DIR_ENV: str(tmp_path / "view")})
    try:
        yield started
    finally:
        started.stop()
        left = leftovers(engine, {L.OWNER_PID: str(started.process.pid)})
        assert not left, f"cubicle serve left objects behind: {left}"


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server for requests that never create a sandbox (errors, auth), one per module."""
    started = start_server(tmp_path_factory.mktemp("serve") / "data")
    try:
        yield started
    finally:
        started.stop()
