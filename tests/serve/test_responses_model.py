"""``agent.model`` naming a Responses model: the server calls the Responses API with its own
key (here the scripted model server stands in for it, through ``OPENAI_BASE_URL``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.desktop import PANEL
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.serve.conftest import start_server
from tests.serve.support import DRILL_ENV, answer, pending_request, screenshot_of, types

__all__ = ["engine"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_responses_model_turn(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    x, y = PANEL.launcher_center("terminal", (1280, 800))
    script = {
        "name": "serve-responses",
        "turns": [
            {
                "computer_call": {
                    "actions": [{"type": "click", "button": "left", "x": x, "y": y}],
                    "pending_safety_checks": [{"id": "sc_1", "code": "c", "message": "open it?"}],
                }
            },
            {"message": "The terminal is open."},
        ],
    }
    bodies: list[Any] = []
    with ScriptedModel(
        parse_script(script), on_turn=lambda i, t, body: bodies.append(body)
    ) as model:
        server = start_server(
            tmp_path / "serve",
            env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url},
        )
        try:
            client = server.client()
            session = client.beta.agents.sessions.create(
                environment=DRILL_ENV,
                agent={
                    "model": "gpt-test",
                    "instructions": "Use the panel.",
                    "tools": [{"type": "computer_use", "include_screenshots": True}],
                },
            )
            assert session.agent.model == "gpt-test"
            assert session.agent.instructions == "Use the panel."
            events = []
            with client.beta.agents.sessions.stream(session.id, input="Open a terminal.") as stream:
                for event in stream:
                    events.append(event)
                    if event.type == "agent.session.requires_action":
                        request_id, request = pending_request(event)
                        assert request["checks"] == [
                            {"id": "sc_1", "code": "c", "message": "open it?"}
                        ]
                        client.beta.agents.sessions.events.create(
                            session.id, events=[answer(request_id, "approve")]
                        )
            assert types(events)[-2:] == ["agent.session.turn.completed", "agent.session.idle"]
            items = [
                i.to_dict() for i in client.beta.agents.sessions.items.list(session.id, order="asc")
            ]
            assert [i["type"] for i in items] == ["message", "computer_use_call", "message"]
            assert items[1]["title"] == f"click ({x}, {y})" and items[1]["status"] == "completed"
            assert screenshot_of(items[1]).size == (
                1280,
                800,
            )  # run_task's default view: the screen
            assert items[2]["content"] == [{"type": "output_text", "text": "The terminal is open."}]
            model.assert_finished()
            # the model was asked the user's text
            assert bodies[0]["input"][0] == {
                "role": "user",
                "content": "Use the panel.\n\nOpen a terminal.",
            }
            client.beta.agents.sessions.delete(session.id)
        finally:
            server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []
