"""A cubicle-drill turn through the real openai client, sync and async: create, stream with the
safety check answered, items paginated, cancel, delete leaving nothing."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import docker
import openai
import pytest
from openai.types.beta.agent_session_event import AgentSessionEvent
from openai.types.beta.agents import session_create_params
from openai.types.beta.environment_param import EnvironmentParamOpenAIHosted

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.support import leftovers
from tests.serve.conftest import Server, engine, module_server, no_session_left
from tests.serve.support import (
    DRILL_ENV,
    MODEL_VIEW,
    answer,
    assert_deleted,
    assert_turn_went_through,
    pending_request,
    sandbox_of,
    screenshot_of,
    types,
)

__all__ = ["engine", "module_server", "no_session_left"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def server(module_server: Server, no_session_left: None) -> Server:
    """The module's one server: every test here deletes its sessions (checked after each)."""
    return module_server


def test_drill_turn_approved_items_paginate_delete(
    server: Server, engine: docker.DockerClient
) -> None:
    client = server.client()
    agent: session_create_params.Agent = {"model": "cubicle-drill", "compaction": {"async_": True}}
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV,
        agent=agent,
        metadata={"test": "approve"},
        spend_control=None,  # unlimited, as openai>=3.63 spells it
    )
    assert session.status == "idle" and session.agent.model == "cubicle-drill"
    assert (session.spend_control.limit, session.spend_control.consumed) == (None, None)
    assert session.agent.compaction is not None and session.agent.compaction.async_ is False
    assert session.environment.type == "openai_hosted"
    events: list[AgentSessionEvent] = []
    requests: list[dict[str, Any]] = []
    with client.beta.agents.sessions.stream(session.id, input="Run the drill.") as stream:
        for event in stream:
            events.append(event)
            if event.type == "agent.session.requires_action":
                request_id, request = pending_request(event)
                requests.append(request)
                client.beta.agents.sessions.events.create(
                    session.id, events=[answer(request_id, "approve")]
                )
    kinds = types(events)
    assert kinds[0] == "agent.session.idle"  # the status when the stream subscribed
    assert_turn_went_through(events)
    for expected in (
        "agent.session.environment.ready",
        "agent.session.turn.created",
        "agent.session.turn.in_progress",
        "agent.session.turn.output_text.done",
    ):
        assert expected in kinds
    assert kinds.index("agent.session.environment.ready") < kinds.index(
        "agent.session.turn.in_progress"
    )
    # the drill's one safety check, as cubicle's request kind
    assert len(requests) == 1 and requests[0]["type"] == "safety_check"
    assert requests[0]["checks"][0]["code"] and requests[0]["call_id"]
    # every computer call is done with the screenshot the model received next
    done = [
        e.item.to_dict()
        for e in events
        if e.type == "agent.session.turn.item.done" and e.item.type == "computer_use_call"
    ]
    assert len(done) >= 4
    for item in done:
        assert item["status"] == "completed" and item["title"]
        assert screenshot_of(item).size == MODEL_VIEW
    final = client.beta.agents.sessions.retrieve(session.id)
    assert final.status == "idle" and final.required_actions == []

    # items: every page as the SDK pages them, in both orders
    everything = [
        i.id for i in client.beta.agents.sessions.items.list(session.id, limit=100, order="asc")
    ]
    assert len(everything) == len(done) + 2  # the user's message, the calls, the final message
    first = client.beta.agents.sessions.items.list(session.id, limit=2, order="asc")
    assert [i.id for i in first.data] == everything[:2] and first.has_more
    paged = [i.id for i in client.beta.agents.sessions.items.list(session.id, limit=2, order="asc")]
    assert paged == everything
    desc = [i.id for i in client.beta.agents.sessions.items.list(session.id, limit=3)]
    assert desc == everything[::-1]
    after = client.beta.agents.sessions.items.list(
        session.id, after=str(everything[2]), order="asc", limit=100
    )
    assert [i.id for i in after.data] == everything[3:] and after.has_more is False
    kinds_of_items = [
        i.type for i in client.beta.agents.sessions.items.list(session.id, order="asc")
    ]
    assert kinds_of_items[0] == "message" and kinds_of_items[-1] == "message"
    listed = client.beta.agents.sessions.list(metadata={"test": "approve"})
    assert [s.id for s in listed.data] == [session.id]

    assert_deleted(engine, server, client, session.id, sandbox_of(engine, server))


def test_drill_turn_denied_async(server: Server, engine: docker.DockerClient) -> None:
    async def main() -> tuple[list[AgentSessionEvent], str]:
        client = server.async_client()
        session = await client.beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-drill"}
        )
        events: list[AgentSessionEvent] = []
        async with client.beta.agents.sessions.stream(session.id, input="Run the drill.") as stream:
            async for event in stream:
                events.append(event)
                if event.type == "agent.session.requires_action":
                    request_id, _ = pending_request(event)
                    await client.beta.agents.sessions.events.create(
                        session.id, events=[answer(request_id, "deny")]
                    )
        items = [
            i.to_dict() async for i in client.beta.agents.sessions.items.list(session.id, limit=2)
        ]
        assert items[0]["type"] == "computer_use_call" and items[0]["status"] == "failed"
        assert not any(i["type"] == "message" and i["role"] == "assistant" for i in items)
        await client.close()
        return events, session.id

    events, session_id = anyio.run(main)
    kinds = types(events)
    assert kinds[-2:] == ["agent.session.turn.failed", "agent.session.idle"]
    assert "agent.session.turn.output_text.done" not in kinds
    failed = events[-2]
    assert failed.type == "agent.session.turn.failed"
    assert failed.turn.error is not None and "safety checks" in failed.turn.error.message
    # nothing ran after the denied call: its item failed, without a screenshot
    call_done = [e.item.to_dict() for e in events if e.type == "agent.session.turn.item.done"]
    assert call_done[-1]["status"] == "failed" and call_done[-1]["output"] is None
    assert_deleted(engine, server, server.client(), session_id, sandbox_of(engine, server))


def test_create_streaming_then_cancel_while_waiting_for_approval(
    server: Server, engine: docker.DockerClient
) -> None:
    """``create(stream=True, input=...)`` streams the first turn; a cancel input while its
    safety check waits ends the turn ``cancelled`` and the stream with the session idle."""
    client = server.client()
    events: list[AgentSessionEvent] = []
    session_id = ""
    stream = client.beta.agents.sessions.create(
        environment=DRILL_ENV,
        agent={
            "model": "cubicle-drill",
            "tools": [{"type": "computer_use", "include_screenshots": False}],
        },
        input="Run the drill.",
        stream=True,
    )
    for event in stream:
        events.append(event)
        if event.type == "agent.session.created":
            session_id = event.session.id
        if event.type == "agent.session.requires_action":
            # one turn at a time: a second message is refused while this one runs
            with pytest.raises(openai.BadRequestError) as busy:
                client.beta.agents.sessions.events.create(
                    session_id,
                    events=[
                        {
                            "type": "agent.session.input.message",
                            "input": [
                                {"role": "user", "content": [{"type": "input_text", "text": "x"}]}
                            ],
                        }
                    ],
                )
            assert busy.value.body["code"] == "turn_in_progress"  # type: ignore[index]
            client.beta.agents.sessions.events.create(
                session_id, events=[{"type": "agent.session.input.cancel"}]
            )
    session = client.beta.agents.sessions.retrieve(session_id)
    assert types(events)[:2] == ["agent.session.created", "agent.session.environment.pending"]
    ids = [e.event_id for e in events]
    assert len(ids) == len(set(ids)), "an event was sent twice"
    # include_screenshots: false: the calls are done without their screenshots
    done = [e.item.to_dict() for e in events if e.type == "agent.session.turn.item.done"]
    assert done and all(i["output"] is None for i in done if i["status"] == "completed")
    assert any(i["status"] == "completed" for i in done)
    kinds = types(events)
    assert kinds[-2:] == ["agent.session.turn.cancelled", "agent.session.idle"]
    assert client.beta.agents.sessions.retrieve(session.id).status == "idle"
    # a second cancel has no turn to stop
    with pytest.raises(openai.BadRequestError) as caught:
        client.beta.agents.sessions.events.create(
            session.id, events=[{"type": "agent.session.input.cancel"}]
        )
    assert caught.value.body["code"] == "no_active_turn"  # type: ignore[index]
    assert_deleted(engine, server, client, session.id, sandbox_of(engine, server))


def test_environment_files_env_setup(
    server: Server, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Files land under the workspace, setup commands run in order as the desktop user with the
    env, and a failing command fails the environment naming it."""
    client = server.client()
    env: EnvironmentParamOpenAIHosted = {
        "type": "openai_hosted",
        "files": [
            {
                "type": "inline",
                "path": "/workspace/in/a.txt",
                "data": base64.b64encode(b"bytes\x00\x01").decode(),
            }
        ],
        "env": {"GREETING": "it's $HOME"},
        "setup_commands": [
            {"command": 'printf "%s|%s|%s" "$(id -un)" "$GREETING" "$(pwd)" > out.txt'},
            {"command": "cat a.txt > copy.bin", "cwd": "/workspace/in"},
        ],
    }
    session = client.beta.agents.sessions.create(environment=env, agent={"model": "cubicle-drill"})
    with client.beta.agents.sessions.events.stream(session.id) as stream:
        for event in stream:
            if event.type in (
                "agent.session.environment.ready",
                "agent.session.environment.failed",
            ):
                break
    assert event.type == "agent.session.environment.ready"
    sandbox_id = sandbox_of(engine, server)
    with Sandbox.attach(sandbox_id) as sandbox, sandbox.connect() as agent:
        out = agent.read_file("/home/cubicle/workspace/out.txt").blob
        copy = agent.read_file("/home/cubicle/workspace/in/copy.bin").blob
    assert out == b"cubicle|it's $HOME|/home/cubicle/workspace"
    assert copy == b"bytes\x00\x01"
    assert_deleted(engine, server, client, session.id, sandbox_id)

    bad = client.beta.agents.sessions.create(
        environment={
            **DRILL_ENV,
            "setup_commands": [{"command": "true"}, {"command": "echo nope >&2; exit 3"}],
        },
        agent={"model": "cubicle-drill"},
    )
    with client.beta.agents.sessions.events.stream(bad.id) as stream:
        for event in stream:
            if event.type == "agent.session.failed":
                break
    failed = client.beta.agents.sessions.retrieve(bad.id)
    assert failed.status == "failed"
    assert (
        failed.error is not None
        and "setup_commands[1]" in failed.error
        and "3" in failed.error
        and "nope" in failed.error
    )
    assert_deleted(engine, server, client, bad.id, sandbox_of(engine, server))


def test_delete_in_the_middle_of_a_turn(server: Server, engine: docker.DockerClient) -> None:
    """DELETE while a turn waits for its approval: the turn stops, the sandbox and its folder go,
    the open event stream ends."""
    client = server.client()
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV, agent={"model": "cubicle-drill"}
    )
    sandbox_id = ""
    events: list[AgentSessionEvent] = []
    with (
        pytest.raises(RuntimeError, match="ended before the turn"),
        client.beta.agents.sessions.stream(session.id, input="Run the drill.") as stream,
    ):
        for event in stream:
            events.append(event)
            if event.type == "agent.session.requires_action":
                sandbox_id = sandbox_of(engine, server)
                assert_deleted(engine, server, client, session.id, sandbox_id)
    assert "agent.session.requires_action" in types(events)
    assert sandbox_id and leftovers(engine, {L.SANDBOX: sandbox_id}) == []


def test_a_shipped_task_runs_as_the_agent_and_its_checks_decide_the_turn(
    server: Server, engine: docker.DockerClient
) -> None:
    """``agent.model: cubicle-task:NAME`` runs that task file (tasks/) with its scripted model:
    its set-up before the turn, its checks of the guest after it (here: the terminal's saved
    count), the computer calls as items with the screenshots the model received."""
    client = server.client()
    session = client.beta.agents.sessions.create(
        environment=DRILL_ENV, agent={"model": "cubicle-task:terminal-output"}
    )
    assert session.agent.model == "cubicle-task:terminal-output"
    events: list[AgentSessionEvent] = []
    with client.beta.agents.sessions.stream(session.id, input="Do the task.") as stream:
        for event in stream:
            events.append(event)
            if event.type == "agent.session.requires_action":
                request_id, _request = pending_request(event)
                client.beta.agents.sessions.events.create(
                    session.id, events=[answer(request_id, "approve")]
                )
    assert_turn_went_through(events)
    calls = [
        e.item.to_dict()
        for e in events
        if e.type == "agent.session.turn.item.done" and e.item.type == "computer_use_call"
    ]
    assert calls and all(item["status"] == "completed" for item in calls)
    assert screenshot_of(calls[0]).size == MODEL_VIEW
    assert_deleted(engine, server, client, session.id, sandbox_of(engine, server))
