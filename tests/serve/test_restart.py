"""A restarted server collects the sandboxes of the sessions it no longer knows."""

from __future__ import annotations

import signal
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.providers.docker.provider import DockerProvider
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


def test_restart_collects_a_sandbox_the_killed_server_was_still_creating(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Killed inside ``Sandbox.create`` (the id not yet listed): the next server takes it by its
    owner label, since no process has the dead server's pid."""
    data = tmp_path / "serve"
    first = start_server(data)
    seen: set[str] = set()
    label = f"{L.OWNER_PID}={first.process.pid}"
    # the engine's event stream says when the guest container exists (under its "-creating"
    # name: the sandbox becomes ready and listed only about a second later)
    events = engine.events(
        decode=True, filters={"type": "container", "event": "create", "label": label}
    )
    try:
        first.client().beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-drill"}
        )
        created = next(iter(events))
        name = str(created["Actor"]["Attributes"]["name"])
        assert name.endswith("-creating"), name
        first.stop(signal.SIGKILL)
        events.close()
        mine: dict[str, str | list[str] | bool] = {"label": label}
        seen = {c.labels[L.SANDBOX] for c in engine.containers.list(all=True, filters=mine)}
        assert seen
        assert list((data / "sandboxes").iterdir()) == []  # not listed: it was never ready
        second = start_server(data)
        second.stop()
        for sandbox_id in seen:
            assert leftovers(engine, {L.SANDBOX: sandbox_id}) == []
    finally:
        events.close()
        first.stop()
        for sandbox_id in seen:
            DockerProvider(engine).destroy(sandbox_id)
