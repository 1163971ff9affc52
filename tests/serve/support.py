"""Helpers of the serve tests: event collection, approval answers, screenshot checks."""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import docker
import openai
import pytest
from openai.types.beta.agent_session_event import AgentSessionEvent
from openai.types.beta.agent_session_input_param import AgentSessionInputParam
from openai.types.beta.environment_param import EnvironmentParamOpenAIHosted
from PIL import Image

from cubicle.orchestrator import labels as L
from tests.orchestrator.support import leftovers
from tests.serve.conftest import Server

DRILL_ENV: EnvironmentParamOpenAIHosted = {
    "type": "openai_hosted",
    "desktop": {"enabled": True},
    "network": {"access": "disabled"},
}
MODEL_VIEW = (1024, 640)
"""What the drill's scripted model sees of the 1280x800 screen."""

ASK_TOOL: Any = {
    "type": "function",
    "name": "request_user_response",
    "description": "Show the user a question and return their answer.",
    "parameters": {
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
}
"""The function tool of the `ask-user` task (and of the second product document's example)."""


def answer(request_id: str, decision: str, kind: str = "safety_check") -> AgentSessionInputParam:
    """The answer to a ``computer_use_approval_request``: cubicle's safety-check kind by
    default (sent as a plain dict: not one of the SDK's kinds), or ``kind`` (e.g. the SDK's
    ``browser_origin_access``)."""
    return cast(
        AgentSessionInputParam,
        {
            "type": "agent.session.input.computer_use_approval_request_result",
            "request_id": request_id,
            "response": {"type": kind, "decision": decision},
        },
    )


def pending_request(event: AgentSessionEvent) -> tuple[str, dict[str, Any]]:
    """The request id and request of the one required action of a requires_action event."""
    assert event.type == "agent.session.requires_action"
    actions = event.session.required_actions
    assert len(actions) == 1, actions
    action: dict[str, Any] = actions[0].to_dict(warnings=False)
    assert action["type"] == "computer_use_approval_request"
    return str(action["request_id"]), dict(action["request"])


def screenshot_of(item: dict[str, Any]) -> Image.Image:
    """The JPEG of a completed computer_use_call item, decoded."""
    output = item["output"]
    assert output["type"] == "computer_screenshot"
    prefix = "data:image/jpeg;base64,"
    assert output["image_url"].startswith(prefix)
    image = Image.open(io.BytesIO(base64.b64decode(output["image_url"][len(prefix) :])))
    assert image.format == "JPEG"
    return image


def types(events: list[AgentSessionEvent]) -> list[str]:
    return [e.type for e in events]


STALE_CHECK = "stale model-visible screenshots"


def assert_turn_went_through(events: list[AgentSessionEvent]) -> None:
    """The turn's loop ran to the model's final message and the session went idle.

    The drill's outcome also holds its own checks of the guest (:mod:`cubicle.orchestrator.drill`):
    on a loaded machine its stale-screenshot check can fail a turn whose loop went through — the
    drill's business, tested in tests/drill. Any other failure fails here.
    """
    kinds = types(events)
    assert kinds[-1] == "agent.session.idle", kinds[-4:]
    assert "agent.session.turn.output_text.done" in kinds, kinds[-4:]
    end = events[-2]
    if end.type == "agent.session.turn.failed":
        error = end.turn.error.message if end.turn.error is not None else ""
        failed = [line for line in error.splitlines() if "FAILED" in line]
        assert failed and all(STALE_CHECK in line for line in failed), error
    else:
        assert end.type == "agent.session.turn.completed", kinds[-4:]


def sandbox_of(engine: docker.DockerClient, server: Server) -> str:
    """The id of the one sandbox the server owns now."""
    containers = engine.containers.list(
        all=True, filters={"label": f"{L.OWNER_PID}={server.process.pid}"}
    )
    ids = {c.labels[L.SANDBOX] for c in containers}
    assert len(ids) == 1, ids
    return ids.pop()


def assert_deleted(
    engine: docker.DockerClient,
    server: Server,
    client: openai.OpenAI,
    session_id: str,
    sandbox_id: str,
) -> None:
    """DELETE ``session_id``: the API says so, nothing labelled with ``sandbox_id`` is left in the
    engine and the session's folder is gone."""
    folder = server.data_dir / "sessions" / session_id
    assert folder.is_dir()
    deleted = client.beta.agents.sessions.delete(session_id)
    assert (deleted.id, deleted.deleted, deleted.object) == (
        session_id,
        True,
        "agent.session.deleted",
    )
    assert leftovers(engine, {L.SANDBOX: sandbox_id}) == []
    assert not folder.exists()
    assert not (server.data_dir / "sandboxes" / sandbox_id).exists()
    with pytest.raises(openai.NotFoundError):
        client.beta.agents.sessions.retrieve(session_id)


@contextmanager
def turn_in_thread(
    client: openai.OpenAI,
    session_id: str,
    text: str,
    *,
    streaming: threading.Event | None = None,
) -> Iterator[tuple[list[AgentSessionEvent], threading.Thread]]:
    """A turn of ``session_id`` with the input ``text``, streamed in a thread (set ``streaming``
    once its stream is open) into the list yielded with the thread. Leaving the block while the
    turn still runs cancels it and waits up to 60 s for the thread."""
    outcome: list[AgentSessionEvent] = []

    def run_turn() -> None:
        with client.beta.agents.sessions.stream(session_id, input=text) as stream:
            if streaming is not None:
                streaming.set()
            outcome.extend(stream)

    worker = threading.Thread(target=run_turn)
    worker.start()
    try:
        yield outcome, worker
    finally:
        if worker.is_alive():
            client.beta.agents.sessions.events.create(
                session_id, events=[{"type": "agent.session.input.cancel"}]
            )
            worker.join(60)
