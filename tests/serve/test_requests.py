"""Bad request bodies are 400s naming the field (``param``, and the message starts with it),
through the real ``openai`` client against the real app in this process; nothing is created or
applied. The request models declare the fields the installed ``openai`` package sends.

Nothing here starts a sandbox: events go to a session put in the server's store with no worker
(the body is read before the worker is looked up).
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest
from openai.types.beta.agents.session_create_params import Agent, SessionCreateParamsBase
from openai.types.beta.agents.sessions.event_create_params import EventCreateParams

from cubicle.orchestrator.serve.requests import AgentBody, CreateRequest, EventsRequest
from cubicle.orchestrator.serve.store import Session
from tests.serve.test_wire import make_session
from tests.serve.test_wire_client import AGENT, TOKEN, Served, create, served

__all__ = ["served"]

pytestmark = pytest.mark.newest

USER = {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}
APPROVAL = "agent.session.input.computer_use_approval_request_result"


def bad_request(caught: pytest.ExceptionInfo[openai.BadRequestError]) -> tuple[str, str]:
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "invalid_request_error", body
    return str(body["param"]), str(body["message"])


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        # wrong type
        ({"metadata": {"k": 3}}, "metadata.k", "should be a valid string"),
        ({"metadata": "k=v"}, "metadata", "must be an object"),
        ({"agent": {**AGENT, "instructions": 3}}, "agent.instructions", "valid string"),
        # unknown field, at the top and nested
        ({"extra_body": {"colour": "red"}}, "colour", "is not a known field"),
        ({"agent": {**AGENT, "colour": "red"}}, "agent.colour", "is not a known field"),
        (
            {"input": [{**USER, "content": [{"type": "input_text", "text": "a", "lang": "en"}]}]},
            "input[0].content[0].lang",
            "is not a known field",
        ),
        # missing field
        ({"agent": {"instructions": "x"}}, "agent.model", "is required"),
        ({"spend_control": {}}, "spend_control.limit", "is required"),
        # bad enum value
        ({"review": "full"}, "review", "must be one of 'none' or 'auto_review', got 'full'"),
        ({"input": [{**USER, "role": "assistant"}]}, "input[0].role", "must be 'user'"),
        # nested list elements, named by their index
        ({"input": [USER, {**USER, "content": []}]}, "input[1].content", "must not be empty"),
        (
            {"input": [USER, {**USER, "content": [{"type": "input_text", "text": 3}]}]},
            "input[1].content[0].text",
            "should be a valid string",
        ),
        (
            {"input": [{**USER, "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
            "input_text parts only",
        ),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata", "more than 16"),
        ({"input": ""}, "input", "must not be empty"),
    ],
)
def test_a_bad_create_body_is_refused_naming_the_field(
    served: Served, fields: dict[str, Any], param: str, words: str
) -> None:
    client = served.client()
    with pytest.raises(openai.BadRequestError) as caught:
        create(client, **fields)
    found, message = bad_request(caught)
    assert found == param
    assert message.startswith(param) and words in message, message
    assert client.beta.agents.sessions.list().data == []  # nothing was created


def test_a_wrong_json_type_is_not_coerced(served: Served) -> None:
    """Strict types on the raw wire: ``"true"`` is no boolean (the client would not send it)."""
    raw = httpx2.post(
        served.base_url + "/agents/sessions",
        json={"environment": {"type": "openai_hosted"}, "agent": AGENT, "stream": "true"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert raw.status_code == 400, raw.text
    error = raw.json()["error"]
    assert (error["param"], error["message"]) == ("stream", "stream should be a valid boolean")


def idle_session(served: Served) -> Session:
    session = make_session()
    served.state.store.add(session)
    return session


@pytest.mark.parametrize(
    ("events", "param", "words"),
    [
        ([], "events", "must not be empty"),
        ([{"type": "agent.session.input.pause"}], "events[0].type", "is not a session input"),
        ([{"turn_id": "t"}], "events[0].type", "is required"),
        ([{"type": "agent.session.input.cancel", "turn_id": "t"}], "events[0].turn_id", "known"),
        (
            [{"type": "agent.session.input.message", "input": [{"role": "user", "content": 5}]}],
            "events[0].input[0].content",
            "should be a valid list",
        ),
        (
            [{"type": APPROVAL, "request_id": "r", "response": {"type": "x", "decision": "ok"}}],
            "events[0].response.decision",
            "must be one of 'approve', 'deny' or 'cancel', got 'ok'",
        ),
        ([{"type": APPROVAL, "response": {}}], "events[0].request_id", "is required"),
        (
            [{"type": "agent.session.input.tool_result", "call_id": "c", "success": True}],
            "events[0].type",
            "no function or MCP tools",
        ),
        # the second entry is wrong: the first (valid) one is not applied either
        (
            [{"type": "agent.session.input.message", "input": "go"}, "cancel"],
            "events[1]",
            "must be an object",
        ),
    ],
)
def test_bad_events_are_refused_naming_the_field_and_nothing_applies(
    served: Served, events: list[Any], param: str, words: str
) -> None:
    session = idle_session(served)
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().beta.agents.sessions.events.create(session.id, events=events)
    found, message = bad_request(caught)
    assert found == param
    assert message.startswith(param) and words in message, message
    assert session.turn is None and session.items == []


def test_events_with_an_unknown_body_field_are_refused(served: Served) -> None:
    session = idle_session(served)
    raw = httpx2.post(
        f"{served.base_url}/agents/sessions/{session.id}/events",
        json={"events": [{"type": "agent.session.input.cancel"}], "after": "x"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert raw.status_code == 400, raw.text
    assert raw.json()["error"]["param"] == "after"


def keys(typed: Any) -> set[str]:
    return set(typed.__required_keys__ | typed.__optional_keys__)


def test_the_models_declare_what_the_openai_package_sends() -> None:
    """A field the installed ``openai`` adds to these requests fails here, not as an unknown
    field in a user's request (``stream`` is the streaming variant's; ``async`` the wire name
    of the package's ``async_``)."""
    assert set(CreateRequest.model_fields) == keys(SessionCreateParamsBase) | {"stream"}
    assert set(AgentBody.model_fields) == keys(Agent)
    assert set(EventsRequest.model_fields) == keys(EventCreateParams) - {"idempotency_key"}
