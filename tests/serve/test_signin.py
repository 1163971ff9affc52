"""Browser sign-in through the real ``openai`` client: ``cubicle-task:sign-in`` raises a
``browser_authentication`` request (the SDK's types) whose ``credential_origin`` is the form's
origin; the client submits, the rules hold (400 naming the rule, 404 unknown, identical resubmission
202, changed 409 with ``x-should-retry: false``), the next request (the code) follows, the task's
check passes; the items record only the actions, and no value — plain, base64 or JSON-escaped —
is in the events, the items, the server's data folder or its log. A short ``--signin-expiry``
withdraws an unanswered request: answering it then is a 409."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import docker
import openai
import pytest
from openai.types.beta.agent_session import (
    RequiredActionSessionRequiredActionResourceComputerUseApprovalRequest as ApprovalAction,
)
from openai.types.beta.agent_session import (
    RequiredActionSessionRequiredActionResourceComputerUseApprovalRequestRequestComputerUseApprovalRequestKindResourceBrowserAuthentication as BrowserAuthentication,  # noqa: E501
)
from openai.types.beta.agent_session_event import AgentSessionEvent
from openai.types.beta.agent_session_input_param import AgentSessionInputParam
from openai.types.beta.agent_session_item import AgentSessionItem
from pydantic import TypeAdapter

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.tasks import load_task
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.serve.conftest import Server, start_server
from tests.serve.support import DRILL_ENV, assert_turn_went_through
from tests.support.signin_site import secret_forms

__all__ = ["engine"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ITEMS: TypeAdapter[AgentSessionItem] = TypeAdapter(AgentSessionItem)
TASK = load_task("sign-in")
assert TASK.signin is not None
CREDENTIALS = TASK.signin


def submit(
    request_id: str, values: dict[str, str], option: str | None = None
) -> AgentSessionInputParam:
    response: dict[str, Any] = {
        "type": "browser_authentication",
        "action": "submit",
        "fields": [{"field_id": k, "value": v} for k, v in values.items()],
    }
    if option is not None:
        response["selected_option"] = option
    return cast(
        AgentSessionInputParam,
        {
            "type": "agent.session.input.computer_use_approval_request_result",
            "request_id": request_id,
            "response": response,
        },
    )


def pending_signin(client: openai.OpenAI, session_id: str) -> ApprovalAction:
    actions = client.beta.agents.sessions.retrieve(session_id).required_actions
    assert len(actions) == 1 and isinstance(actions[0], ApprovalAction), actions
    assert isinstance(actions[0].request, BrowserAuthentication), actions[0].request
    return actions[0]


@pytest.fixture
def logged_server(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> Iterator[tuple[Server, Path]]:
    """A server whose stderr (its log) goes to a file the test reads."""
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        started = start_server(tmp_path / "serve", stderr=log)
        try:
            yield started, log_path
        finally:
            started.stop()
            left = leftovers(engine, {L.OWNER_PID: str(started.process.pid)})
            assert not left, f"cubicle serve left objects behind: {left}"


def test_the_sign_in_task_is_answered_by_the_client_and_keeps_no_value(
    logged_server: tuple[Server, Path],
) -> None:
    server, log_path = logged_server
    client = server.client()
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV, agent={"model": "cubicle-task:sign-in"}
    )
    events: list[AgentSessionEvent] = []
    requests: list[BrowserAuthentication] = []
    port = TASK.port
    with client.beta.agents.sessions.stream(session.id, input="Sign in.") as stream:
        for event in stream:
            events.append(event)
            if event.type != "agent.session.requires_action":
                continue
            action = pending_signin(client, session.id)
            request = cast(BrowserAuthentication, action.request)
            requests.append(request)
            assert request.credential_origin == f"http://127.0.0.1:{port}"
            ids = [f.id for f in request.fields]
            if ids == ["email", "password"]:
                values = {"email": CREDENTIALS.email, "password": CREDENTIALS.password}
                with pytest.raises(openai.NotFoundError) as unknown:
                    client.beta.agents.sessions.events.create(
                        session.id, events=[submit("req_nope", values)]
                    )
                assert unknown.value.response.headers["x-should-retry"] == "false"
                with pytest.raises(openai.BadRequestError) as broken:
                    client.beta.agents.sessions.events.create(
                        session.id, events=[submit(action.request_id, {"email": CREDENTIALS.email})]
                    )
                assert broken.value.code == "required" and "password" in broken.value.message
                with pytest.raises(openai.BadRequestError) as too_long:
                    client.beta.agents.sessions.events.create(
                        session.id,
                        events=[submit(action.request_id, {**values, "password": "x" * 16_385})],
                    )
                assert too_long.value.code == "value_length"
                for error in (broken.value, too_long.value):
                    assert CREDENTIALS.email not in error.message
                reply = client.beta.agents.sessions.events.with_raw_response.create(
                    session.id, events=[submit(action.request_id, values)]
                )
                assert reply.http_response.status_code == 202
                assert reply.http_response.content == b""
                again = client.beta.agents.sessions.events.with_raw_response.create(
                    session.id, events=[submit(action.request_id, values)]
                )
                assert again.http_response.status_code == 202  # identical: accepted, not refilled
                with pytest.raises(openai.ConflictError) as changed:
                    client.beta.agents.sessions.events.create(
                        session.id, events=[submit(action.request_id, {**values, "password": "x"})]
                    )
                assert changed.value.response.headers["x-should-retry"] == "false"
            else:
                assert ids == ["code"], ids
                client.beta.agents.sessions.events.create(
                    session.id, events=[submit(action.request_id, {"code": CREDENTIALS.code})]
                )
    assert len(requests) == 2
    assert_turn_went_through(events)  # the task's check: the site reached its signed-in page

    rows = client.beta.agents.sessions.items.list(session.id, order="asc")
    items = [i.to_dict() for i in rows]
    for item in items:
        ITEMS.validate_python(item)
    signin_items = [i for i in items if str(i["type"]).startswith("computer_use_approval")]
    assert [i["type"] for i in signin_items] == [
        "computer_use_approval_request",
        "computer_use_approval_request_result",
    ] * 2
    assert signin_items[1]["response"] == {
        "type": "browser_authentication",
        "action": "submit",
        "selected_option": None,
    }

    seen = json.dumps([e.to_dict(warnings=False) for e in events]) + json.dumps(items)
    seen += "".join(
        p.read_text(errors="replace") for p in server.data_dir.rglob("*") if p.is_file()
    )
    seen += log_path.read_text(errors="replace")
    for value in (CREDENTIALS.email, CREDENTIALS.password, CREDENTIALS.code):
        for form in secret_forms(value):
            assert form not in seen, f"a submitted value ({form[:3]!r}…) leaked"


def test_an_expired_request_is_withdrawn_and_answering_it_is_a_conflict(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "serve", "--signin-expiry", "2")
    try:
        client = server.client()
        session = client.beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-task:sign-in"}
        )
        request_id = ""
        with client.beta.agents.sessions.stream(session.id, input="Sign in.") as stream:
            for event in stream:
                if event.type == "agent.session.requires_action" and not request_id:
                    request_id = pending_signin(client, session.id).request_id
                if event.type.startswith("agent.session.turn.") and event.type.endswith(
                    ("completed", "failed", "cancelled")
                ):
                    break
        assert request_id
        with pytest.raises(openai.ConflictError) as late:
            client.beta.agents.sessions.events.create(
                session.id, events=[submit(request_id, {"email": "a", "password": "b"})]
            )
        assert late.value.response.headers["x-should-retry"] == "false"
        assert "no longer pending" in late.value.message
    finally:
        server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []


def test_a_cancelled_sign_in_lets_the_turn_go_on_without_signing_in(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "serve")
    try:
        client = server.client()
        session = client.beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-task:sign-in"}
        )
        cancelled: list[str] = []
        ended = ""
        with client.beta.agents.sessions.stream(session.id, input="Sign in.") as stream:
            for event in stream:
                if event.type == "agent.session.requires_action":
                    request_id = pending_signin(client, session.id).request_id
                    cancelled.append(request_id)
                    client.beta.agents.sessions.events.create(
                        session.id,
                        events=[
                            cast(
                                AgentSessionInputParam,
                                {
                                    "type": "agent.session.input."
                                    "computer_use_approval_request_result",
                                    "request_id": request_id,
                                    "response": {
                                        "type": "browser_authentication",
                                        "action": "cancel",
                                    },
                                },
                            )
                        ],
                    )
                if event.type in ("agent.session.turn.completed", "agent.session.turn.failed"):
                    ended = event.type
                    break
        assert len(cancelled) == 1, "a cancelled form is not asked again in the turn"
        assert (
            ended == "agent.session.turn.failed"
        )  # the scripted model never saw the signed-in page
        items = [
            i.to_dict() for i in client.beta.agents.sessions.items.list(session.id, order="asc")
        ]
        results = [i for i in items if i["type"] == "computer_use_approval_request_result"]
        assert [r["response"] for r in results] == [
            {"type": "browser_authentication", "action": "cancel"}
        ]
    finally:
        server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []
