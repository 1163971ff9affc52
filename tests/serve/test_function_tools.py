"""Function tools through the real ``openai`` client: the model calls a declared tool, the turn
pauses as a pending ``function_call`` required action, the client's ``tool_result`` resumes it
and reaches the model as sent; the history holds the call and its output as the SDK types them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import docker
import openai
import pytest
from openai.types.beta.agent_session import (
    RequiredActionSessionRequiredActionResourceFunctionCall as FunctionCallAction,
)
from openai.types.beta.agent_session_event import AgentSessionEvent
from openai.types.beta.agent_session_input_param import AgentSessionInputParam
from openai.types.beta.agent_session_item import AgentSessionItem
from openai.types.beta.agent_tool import AgentToolResourceFunction
from pydantic import TypeAdapter

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator import labels as L
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.serve.conftest import Server, start_server
from tests.serve.support import (
    ASK_TOOL,
    DRILL_ENV,
    assert_turn_went_through,
    sandbox_of,
    types,
)

__all__ = ["engine"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ITEMS: TypeAdapter[AgentSessionItem] = TypeAdapter(AgentSessionItem)


def tool_result(
    turn_id: str, call_id: str, *, output: str | None = None, error: str | None = None
) -> AgentSessionInputParam:
    event: dict[str, Any] = {
        "type": "agent.session.input.tool_result",
        "turn_id": turn_id,
        "call_id": call_id,
        "success": error is None,
    }
    event.update({"output": output} if error is None else {"error": error})
    return cast(AgentSessionInputParam, event)


def pending_call(client: openai.OpenAI, session_id: str) -> FunctionCallAction:
    """The one required action of the session, a function call (the SDK's type)."""
    actions = client.beta.agents.sessions.retrieve(session_id).required_actions
    assert len(actions) == 1 and isinstance(actions[0], FunctionCallAction), actions
    return actions[0]


def items_of(client: openai.OpenAI, session_id: str) -> list[dict[str, Any]]:
    """The session's items, each validated by the SDK's item model."""
    rows = client.beta.agents.sessions.items.list(session_id, order="asc")
    items = [i.to_dict() for i in rows]
    for item in items:
        ITEMS.validate_python(item)
    return items


def test_the_ask_user_task_pauses_for_the_answer_and_saves_it(
    server: Server, engine: docker.DockerClient
) -> None:
    client = server.client()
    answer = 'Blue, then "green" & 42'
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV,
        agent={"model": "cubicle-task:ask-user", "tools": [ASK_TOOL]},
    )
    declared = [t for t in session.agent.tools if isinstance(t, AgentToolResourceFunction)]
    assert [(t.name, t.parameters) for t in declared] == [
        ("request_user_response", ASK_TOOL["parameters"])
    ]
    events: list[AgentSessionEvent] = []
    calls: list[FunctionCallAction] = []
    with client.beta.agents.sessions.stream(session.id, input="Do the task.") as stream:
        for event in stream:
            events.append(event)
            if event.type == "agent.session.requires_action":
                call = pending_call(client, session.id)
                calls.append(call)
                assert call.name == "request_user_response"
                assert call.arguments == {"question": "What should I write in answer.txt?"}
                with pytest.raises(openai.NotFoundError) as unknown:
                    client.beta.agents.sessions.events.create(
                        session.id, events=[tool_result(call.turn_id, "call_nope", output="x")]
                    )
                assert unknown.value.response.headers["x-should-retry"] == "false"
                with pytest.raises(openai.NotFoundError):  # the right call, the wrong turn
                    client.beta.agents.sessions.events.create(
                        session.id, events=[tool_result("turn_other", call.call_id, output="x")]
                    )
                with pytest.raises(openai.ConflictError) as twice:  # one request, two answers
                    client.beta.agents.sessions.events.create(
                        session.id,
                        events=[
                            tool_result(call.turn_id, call.call_id, output="first"),
                            tool_result(call.turn_id, call.call_id, output="second"),
                        ],
                    )
                assert twice.value.response.headers["x-should-retry"] == "false"
                assert "events[1]" in twice.value.message and "events[0]" in twice.value.message
                # nothing of that request applied: the call is still pending, answered now
                assert pending_call(client, session.id).call_id == call.call_id
                client.beta.agents.sessions.events.create(
                    session.id, events=[tool_result(call.turn_id, call.call_id, output=answer)]
                )
                with pytest.raises(openai.ConflictError) as again:
                    client.beta.agents.sessions.events.create(
                        session.id, events=[tool_result(call.turn_id, call.call_id, output="y")]
                    )
                assert again.value.response.headers["x-should-retry"] == "false"
                assert again.value.code == "conflict"
    assert len(calls) == 1
    assert_turn_went_through(events)  # the task's check: answer.txt holds the answer exactly
    done = [e for e in events if e.type == "agent.session.turn.output_text.done"]
    assert [e.text for e in done] == [f"The user answered: {answer}"]
    assert "agent.session.requires_action" in types(events)
    items = items_of(client, session.id)
    kinds = [i["type"] for i in items]
    assert kinds[:3] == ["message", "function_call", "function_call_output"], kinds
    assert kinds[-1] == "message" and "computer_use_call" in kinds
    call_item, output_item = items[1], items[2]
    assert call_item["call_id"] == output_item["call_id"] == calls[0].call_id
    assert call_item["status"] == output_item["status"] == "completed"
    assert call_item["arguments"] == calls[0].arguments
    assert output_item["output"] == answer and output_item.get("error") is None
    with pytest.raises(openai.ConflictError):  # the turn ended: still answered
        client.beta.agents.sessions.events.create(
            session.id, events=[tool_result(calls[0].turn_id, calls[0].call_id, output="z")]
        )
    sandbox = sandbox_of(engine, server)
    client.beta.agents.sessions.delete(session.id)
    assert leftovers(engine, {L.SANDBOX: sandbox}) == []


def test_a_failure_and_a_structured_output_reach_the_model_as_sent(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """A Responses model (the scripted model through ``OPENAI_BASE_URL``) calls the tool twice:
    ``success: false`` reaches it as the failure text, a JSON output exactly as sent. In the next
    turn a call pending when the turn is cancelled is withdrawn: ``incomplete``, then a 409."""
    script = {
        "name": "fn",
        "turns": [
            {"function_call": {"name": "request_user_response", "arguments": {"question": "A?"}}},
            {"function_call": {"name": "request_user_response", "arguments": {"question": "B?"}}},
            {"message": "Thanks."},
            {"function_call": {"name": "request_user_response", "arguments": {"question": "C?"}}},
            {"message": "never sent: the turn is cancelled while C is pending"},
        ],
    }
    structured = json.dumps({"color": "blue", "shades": [1, 2]})
    bodies: list[dict[str, Any]] = []
    with ScriptedModel(parse_script(script), on_turn=lambda i, t, b: bodies.append(b)) as model:
        server = start_server(
            tmp_path / "serve",
            env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url},
        )
        try:
            client = server.client()
            session = client.beta.agents.sessions.create(
                environment=DRILL_ENV, agent={"model": "gpt-test", "tools": [ASK_TOOL]}
            )
            answers = iter([{"error": "the user declined"}, {"output": structured}])
            events: list[AgentSessionEvent] = []
            with client.beta.agents.sessions.stream(session.id, input="Ask twice.") as stream:
                for event in stream:
                    events.append(event)
                    if event.type == "agent.session.requires_action":
                        call = pending_call(client, session.id)
                        client.beta.agents.sessions.events.create(
                            session.id,
                            events=[tool_result(call.turn_id, call.call_id, **next(answers))],
                        )
            assert types(events)[-2:] == ["agent.session.turn.completed", "agent.session.idle"]
            assert model.turns_served == 3 and not model.failures
            declared = [t for t in bodies[0]["tools"] if t["type"] == "function"]
            assert [(t["name"], t["parameters"]) for t in declared] == [
                ("request_user_response", ASK_TOOL["parameters"])
            ]
            failure, success = bodies[1]["input"][-1], bodies[2]["input"][-1]
            assert failure == {
                "type": "function_call_output",
                "call_id": "call_fn_0001",
                "output": json.dumps({"success": False, "error": "the user declined"}),
            }
            assert success["call_id"] == "call_fn_0002" and success["output"] == structured
            items = items_of(client, session.id)
            assert [(i["type"], i["status"]) for i in items[1:5]] == [
                ("function_call", "failed"),
                ("function_call_output", "failed"),
                ("function_call", "completed"),
                ("function_call_output", "completed"),
            ]
            assert items[2]["error"] == "the user declined" and items[2].get("output") is None
            assert items[4]["output"] == structured
            withdrawn: list[FunctionCallAction] = []
            with client.beta.agents.sessions.stream(session.id, input="Ask again.") as stream:
                for event in stream:
                    if event.type == "agent.session.requires_action":
                        withdrawn.append(pending_call(client, session.id))
                        client.beta.agents.sessions.events.create(
                            session.id, events=[{"type": "agent.session.input.cancel"}]
                        )
                    if event.type == "agent.session.turn.cancelled":
                        break
            assert len(withdrawn) == 1
            assert client.beta.agents.sessions.retrieve(session.id).required_actions == []
            assert items_of(client, session.id)[-1]["status"] == "incomplete"
            with pytest.raises(openai.ConflictError):
                client.beta.agents.sessions.events.create(
                    session.id,
                    events=[tool_result(withdrawn[0].turn_id, withdrawn[0].call_id, output="x")],
                )
            client.beta.agents.sessions.delete(session.id)
        finally:
            server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []


def test_the_sdks_tool_handlers_answer_the_call(
    docker_image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """``sessions.stream(..., tool_handlers=...)``: the SDK answers the ``function_call`` item
    the moment it is added (so the call is pending by then); a mapping goes as compact JSON."""
    script = {
        "name": "sdk",
        "turns": [
            {"function_call": {"name": "request_user_response", "arguments": {"question": "C?"}}},
            {"message": "The user answered: {TOOL_OUTPUT}"},
        ],
    }
    asked: list[dict[str, Any]] = []

    def handler(arguments: dict[str, Any]) -> dict[str, Any]:
        asked.append(arguments)
        return {"color": "teal"}

    with ScriptedModel(parse_script(script)) as model:
        server = start_server(
            tmp_path / "serve",
            env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url},
        )
        try:
            client = server.client()
            session = client.beta.agents.sessions.create(
                environment=DRILL_ENV, agent={"model": "gpt-test", "tools": [ASK_TOOL]}
            )
            with client.beta.agents.sessions.stream(
                session.id, input="Ask.", tool_handlers={"request_user_response": handler}
            ) as stream:
                events = list(stream)
            assert asked == [{"question": "C?"}]
            texts = [e.text for e in events if e.type == "agent.session.turn.output_text.done"]
            assert texts == ['The user answered: {"color":"teal"}']
            assert items_of(client, session.id)[2]["output"] == '{"color":"teal"}'
            client.beta.agents.sessions.delete(session.id)
        finally:
            server.stop()
        assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []
