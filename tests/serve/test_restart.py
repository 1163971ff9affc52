"""A restarted server collects the sandboxes of the sessions it no longer knows."""

from __future__ import annotations

import signal
from pathlib import Path

import docker
import pytest

from orchestrator import labels as L
from orchestrator.providers.docker import DockerProvider
from tests.orchestrator.support import leftovers
from tests.serve.conftest import engine, start_server
from tests.serve.support import DRILL_ENV

__all__ = ["engine"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_restart_collects_the_killed_servers_sandboxes(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    data = tmp_path / "serve"
    first = start_server(data)
    sandbox_ids: set[str] = set()
    try:
        client = first.client()
        session = client.beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-drill"}
        )
        with client.beta.agents.sessions.events.stream(session.id) as stream:
            for event in stream:
                if event.type == "agent.session.environment.ready":
                    break
        containers = engine.containers.list(filters={"label": f"{L.OWNER_PID}={first.process.pid}"})
        sandbox_ids = {c.labels[L.SANDBOX] for c in containers}
        assert len(sandbox_ids) == 1
        first.stop(signal.SIGKILL)  # no clean-up: the sandbox and its folder stay behind
        (sandbox_id,) = sandbox_ids
        assert leftovers(engine, {L.SANDBOX: sandbox_id})
        assert (data / "sessions" / session.id).is_dir()

        second = start_server(data)
        try:
            assert leftovers(engine, {L.SANDBOX: sandbox_id}) == []
            assert not (data / "sessions" / session.id).exists()
            assert list((data / "sandboxes").iterdir()) == []
            assert second.client().beta.agents.sessions.list().data == []
        finally:
            second.stop()
    finally:
        first.stop()
        for sandbox_id in sandbox_ids:  # whatever the test's outcome, nothing stays
            DockerProvider(engine).destroy(sandbox_id)
