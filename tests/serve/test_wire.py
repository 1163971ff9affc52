"""Every payload cubicle serve emits validates *strictly* against the installed openai package's
models (the client itself parses leniently, so a missing required field would pass unseen).

Marker ``newest``: ``make newest`` runs these against the newest openai the bounds allow."""

from __future__ import annotations

import base64
import typing
from typing import Any

import pytest
from openai.types.beta.agent_session import AgentSession
from openai.types.beta.agent_session_event import AgentSessionEvent
from openai.types.beta.agent_session_item import AgentSessionItem
from pydantic import BaseModel, TypeAdapter, ValidationError

from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.agents import parse_agent
from cubicle.orchestrator.serve.environment import parse_environment
from cubicle.orchestrator.serve.errors import ApiError
from cubicle.orchestrator.serve.reporter import TurnReporter, describe_actions
from cubicle.orchestrator.serve.store import PendingApproval, Session, page

pytestmark = pytest.mark.newest

EVENT = TypeAdapter(AgentSessionEvent)
ITEM = TypeAdapter(AgentSessionItem)
PNG_1x1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)


def strict(model: type[BaseModel] | TypeAdapter[Any], payload: dict[str, Any]) -> None:
    if isinstance(model, TypeAdapter):
        model.validate_python(payload, strict=False)
    else:
        model.model_validate(payload)


def make_session(**environment: Any) -> Session:
    plan = parse_environment({"type": "openai_hosted", **environment})
    agent = parse_agent({"agent": {"model": "cubicle-drill"}})
    return Session(wire.new_id("sess"), agent=agent, plan=plan, metadata={"k": "v"}, review="none")


def test_session_objects_and_status_events_validate() -> None:
    session = make_session(
        network={
            "access": "restricted",
            "allowed_domains": ["example.com", "api.example.org:8443"],
        },
        files=[{"type": "inline", "path": "/workspace/a.txt", "data": "aGk="}],
        container_size="large",
    )
    snapshot = session.snapshot()
    strict(AgentSession, snapshot)
    parsed = AgentSession.model_validate(snapshot)
    assert (parsed.spend_control.limit, parsed.spend_control.consumed) == (None, None)
    assert parsed.agent.compaction is not None and parsed.agent.compaction.async_ is False
    assert snapshot["environment"]["network"] == {
        "access": "restricted",
        "allowed_domains": ["example.com", "api.example.org:8443"],
    }
    assert snapshot["environment"]["files"][0]["size_bytes"] == 2
    assert str(session.plan.network) == "allow:api.example.org:8443,example.com"
    for status in ("idle", "in_progress", "failed"):
        session.status = typing.cast(Any, status)
        strict(EVENT, session.status_event())
    strict(EVENT, wire.event("agent.session.created", session=snapshot))
    strict(
        EVENT,
        wire.event(
            "agent.session.environment.ready",
            session_id=session.id,
            environment=session.environment_state(),
        ),
    )


@pytest.mark.parametrize("field", ["spend_control", "status", "agent", "vault_ids"])
def test_a_snapshot_without_a_required_field_is_refused_naming_it(field: str) -> None:
    """The check above can fail: the installed models refuse a session that lacks a field they
    require (``spend_control`` became required in openai 3.63), naming the field."""
    snapshot = make_session().snapshot()
    del snapshot[field]
    with pytest.raises(ValidationError) as caught:
        strict(AgentSession, snapshot)
    assert [error["loc"] for error in caught.value.errors()] == [(field,)]
    assert field in str(caught.value)


@pytest.mark.parametrize(
    "compaction", [None, {}, {"async": None}, {"async": True}, {"async": False}]
)
def test_compaction_is_accepted_and_reported_blocking(compaction: Any) -> None:
    agent = parse_agent({"agent": {"model": "cubicle-drill", "compaction": compaction}})
    assert agent.resource()["compaction"] == {"async": False}


def test_turn_events_and_items_validate(tmp_path: Any) -> None:
    session = make_session()
    turn_id = wire.new_id("turn")
    turn = wire.turn_object(turn_id, session.id, session.agent.id, status="queued", created_at=1)
    for kind in ("created", "in_progress", "completed", "cancelled"):
        strict(
            EVENT,
            wire.event(
                f"agent.session.turn.{kind}", session_id=session.id, turn_id=turn_id, turn=turn
            ),
        )
    failed = wire.turn_object(
        turn_id,
        session.id,
        session.agent.id,
        status="failed",
        created_at=1,
        error={"code": "sandbox_error", "message": "x"},
    )
    strict(
        EVENT,
        wire.event(
            "agent.session.turn.failed", session_id=session.id, turn_id=turn_id, turn=failed
        ),
    )
    strict(ITEM, wire.user_message(turn_id, [{"type": "input_text", "text": "hi"}]))
    strict(ITEM, wire.assistant_message(turn_id, "done"))
    # a model turn with one call, its screenshot, a final message: through the reporter
    reporter = TurnReporter(session, turn_id)
    reporter.on_record(
        {
            "kind": "model_turn",
            "calls": [
                {
                    "call_id": "c1",
                    "actions": [{"type": "click", "x": 1, "y": 2}, {"type": "type", "text": "abc"}],
                }
            ],
            "message": None,
        }
    )
    reporter.on_screenshot({"kind": "screenshot", "file": "shots/0000.png", "note": None}, PNG_1x1)
    reporter.on_record({"kind": "model_turn", "calls": [], "message": "All done."})
    seen = list(session.recent)  # every event the session published
    for event in seen:
        strict(EVENT, event)
    assert [e["type"] for e in seen] == [
        "agent.session.turn.item.added",
        "agent.session.turn.item.done",
        "agent.session.turn.item.added",
        "agent.session.turn.output_text.done",
        "agent.session.turn.item.done",
    ]
    call = seen[1]["item"]
    assert call["title"] == "click (1, 2); type 'abc'" and call["status"] == "completed"
    assert call["output"]["image_url"].startswith("data:image/jpeg;base64,")
    for item in session.items:
        strict(ITEM, item)
    assert session.latest_screenshot is not None and session.latest_screenshot[:2] == b"\xff\xd8"


def test_required_action_shape() -> None:
    pending = PendingApproval(
        {
            "type": "computer_use_approval_request",
            "request_id": "req_1",
            "turn_id": "turn_1",
            "request": {"type": wire.SAFETY_CHECK_KIND, "call_id": "c", "checks": []},
        }
    )
    assert (pending.request_id, pending.kind) == ("req_1", "safety_check")


def test_pages() -> None:
    rows = [{"id": f"i{n}"} for n in range(5)]
    first = page(rows, after=None, order="asc", limit=2)
    assert [r["id"] for r in first["data"]] == ["i0", "i1"] and first["has_more"]
    assert (first["first_id"], first["last_id"]) == ("i0", "i1")
    last = page(rows, after="i3", order="asc", limit=2)
    assert [r["id"] for r in last["data"]] == ["i4"] and not last["has_more"]
    assert [r["id"] for r in page(rows, after="i3", order="desc", limit=5)["data"]] == [
        "i2",
        "i1",
        "i0",
    ]
    assert page([], after=None, order="desc", limit=20) == {
        "object": "list",
        "data": [],
        "has_more": False,
        "first_id": None,
        "last_id": None,
    }
    for kwargs, param in (
        ({"order": "up", "limit": 1, "after": None}, "order"),
        ({"order": "asc", "limit": 0, "after": None}, "limit"),
        ({"order": "asc", "limit": 1, "after": "zz"}, "after"),
    ):
        with pytest.raises(ApiError) as caught:
            page(rows, **kwargs)  # type: ignore[arg-type]
        assert caught.value.param == param and caught.value.status == 400


def test_describe_actions() -> None:
    assert describe_actions([]) == "screenshot"
    assert (
        describe_actions([{"type": "keypress", "keys": ["CTRL", "S"]}, {"type": "wait"}])
        == "keypress CTRL+S; wait"
    )
