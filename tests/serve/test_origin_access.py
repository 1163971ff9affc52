"""Ask mode through ``cubicle serve --ask-origins`` and the real ``openai`` client.

A Responses-model agent (the scripted model server as ``OPENAI_BASE_URL``) opens Chromium from
the panel and goes to ``http://asked.test/page``; the session's sandbox has network
``restricted`` to another domain, so the egress proxy holds the request and the client sees an
``agent.session.requires_action`` whose request is the SDK's ``browser_origin_access``. The
origin server (:mod:`tests.support.origin_server`) is reachable only through the proxy. Approve:
the server saw ``/page`` and the next ``computer_use_call`` item's screenshot shows the page;
deny: the server never saw it and no page is drawn. Chromium's own background origins are
answered ``cancel``. Every decision is in the egress log, signed by the session; deleting the
session leaves nothing of its sandbox.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.beta.agent_session_event import AgentSessionEvent
from openai.types.beta.agent_session_input_param import AgentSessionInputParam
from openai.types.beta.agents.session_create_params import Agent as AgentParam
from openai.types.beta.environment_param import EnvironmentParamOpenAIHosted
from PIL import Image

from cubicle.drivers.scripted_model import ScriptedModel, Turn, parse_script
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.trajectory import read_trajectory
from tests.desktop.checks import wait_window, window_box
from tests.orchestrator.conftest import engine
from tests.orchestrator.support import leftovers
from tests.serve.conftest import REPO, Server, start_server
from tests.serve.support import answer, assert_deleted, sandbox_of, screenshot_of, types
from tests.support.origin_server import GREEN, OriginServer, origin, resolve_in_proxy

__all__ = ["engine", "origin"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HOST = "asked.test"
WAIT_S = 60.0
SCREEN = (1280, 800)
"""The Responses-model turn's view: the screen (run_task's default)."""


def browse_script() -> dict[str, Any]:
    x, y = PANEL.launcher_center("browser", SCREEN)
    return {
        "name": "serve-origin-access",
        "turns": [
            {"computer_call": {"actions": [{"type": "click", "button": "left", "x": x, "y": y}]}},
            {
                "computer_call": {
                    "actions": [
                        {"type": "keypress", "keys": ["CTRL", "L"]},
                        {"type": "type", "text": f"http://{HOST}/page"},
                        {"type": "keypress", "keys": ["ENTER"]},
                    ]
                }
            },
            {"computer_call": {"actions": [{"type": "wait"}]}},
            {"message": "Done."},
        ],
    }


@dataclass
class Run:
    """What the model's hooks and the client's answers shared during one session."""

    engine: docker.DockerClient
    origin: OriginServer
    server: Server | None = None
    sandbox_id: str | None = None
    window: tuple[int, int, int, int] | None = None
    answered: list[tuple[str, str]] = field(default_factory=list)
    """``(origin, decision)`` of every browser_origin_access request the client answered."""
    seen: set[str] = field(default_factory=set)
    """Request ids answered (a request stays in later snapshots until the server drops it)."""
    decided: threading.Event = field(default_factory=threading.Event)
    """Set once the client answered the question about ``http://asked.test``."""

    def on_turn(self, index: int, turn: Turn, body: dict[str, Any]) -> None:
        """The model's thinking time: before the address is typed, the test names resolve in
        the proxy and Chromium's window is up; before the call after it, the person answered."""
        if index == 1:
            assert self.server is not None
            self.sandbox_id = sandbox_of(self.engine, self.server)
            resolve_in_proxy(self.engine, self.sandbox_id, self.origin)
            with Sandbox.attach(self.sandbox_id).connect() as client:
                self.window = window_box(wait_window(client, "Chromium", WAIT_S))
                # the start page (its origin asked and cancelled) done drawing, as a person
                # looks before typing: a late error page would take the address bar's text
                client.settle(quiet_ms=800, timeout_ms=20_000, timeout=60)
        elif index == 2:
            self.decided.wait(WAIT_S)  # no exception here: the model server would answer 500


def near_share(
    image: Image.Image, box: tuple[int, int, int, int], colour: tuple[int, ...]
) -> float:
    """The fraction of ``box`` within a JPEG's tolerance of ``colour``."""
    region = image.convert("RGB").crop(box)
    counts = region.getcolors(maxcolors=region.width * region.height) or []
    hits = sum(
        count
        for count, pixel in counts
        if isinstance(pixel, tuple)
        and max(abs(a - b) for a, b in zip(pixel, colour, strict=True)) <= 24
    )
    return hits / (region.width * region.height)


ENVIRONMENT: EnvironmentParamOpenAIHosted = {
    "type": "openai_hosted",
    "desktop": {"enabled": True},
    "network": {"access": "restricted", "allowed_domains": ["example.test"]},
}
AGENT: AgentParam = {"model": "gpt-test", "tools": [{"type": "computer_use"}]}


def to_answer(
    run: Run, event: AgentSessionEvent, decision: str
) -> Iterator[tuple[AgentSessionInputParam, Callable[[], None]]]:
    """For each origin request of a ``requires_action`` event not answered yet: the answer
    (``decision`` for the asked host, ``cancel`` for Chromium's own origins) and what to
    record once it is sent."""
    if event.type != "agent.session.requires_action":
        return
    for action in event.session.required_actions:
        data: dict[str, Any] = action.to_dict(warnings=False)
        request, request_id = dict(data["request"]), str(data["request_id"])
        if request_id in run.seen:
            continue
        run.seen.add(request_id)
        assert request["type"] == "browser_origin_access", data
        assert request["reason"], request
        origin = str(request["origin"])
        verdict = decision if origin in (f"http://{HOST}", f"https://{HOST}") else "cancel"

        def sent(origin: str = origin, verdict: str = verdict) -> None:
            run.answered.append((origin, verdict))
            if origin == f"http://{HOST}":
                run.decided.set()

        yield answer(request_id, verdict, "browser_origin_access"), sent


def run_session(run: Run, client: OpenAI, decision: str) -> tuple[str, list[AgentSessionEvent]]:
    """Create the session and run its turn, answering every origin question (:func:`to_answer`);
    the session id and the events."""
    session = client.beta.agents.sessions.create(environment=ENVIRONMENT, agent=AGENT)
    events: list[AgentSessionEvent] = []
    with client.beta.agents.sessions.stream(session.id, input="Open the page.") as stream:
        for event in stream:
            events.append(event)
            for reply, sent in to_answer(run, event, decision):
                client.beta.agents.sessions.events.create(session.id, events=[reply])
                sent()
    return session.id, events


async def run_session_async(
    run: Run, client: AsyncOpenAI, decision: str
) -> tuple[str, list[AgentSessionEvent]]:
    """:func:`run_session` with the async client."""
    session = await client.beta.agents.sessions.create(environment=ENVIRONMENT, agent=AGENT)
    events: list[AgentSessionEvent] = []
    async with client.beta.agents.sessions.stream(session.id, input="Open the page.") as stream:
        async for event in stream:
            events.append(event)
            for reply, sent in to_answer(run, event, decision):
                await client.beta.agents.sessions.events.create(session.id, events=[reply])
                sent()
    return session.id, events


async def closing_async(
    client: AsyncOpenAI, run: Run, decision: str
) -> tuple[str, list[AgentSessionEvent]]:
    try:
        return await run_session_async(run, client, decision)
    finally:
        await client.close()


def egress_answers(sandbox_id: str) -> list[dict[str, Any]]:
    """The ``answer`` lines of the sandbox's egress log, as ``cubicle logs`` prints them."""
    done = subprocess.run(
        [sys.executable, "-m", "cubicle.orchestrator.cli", "logs", sandbox_id],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "answer"]


@pytest.fixture
def run(
    docker_image: str, engine: docker.DockerClient, origin: OriginServer, tmp_path: Path
) -> Iterator[Run]:
    started = Run(engine, origin)
    yield started
    if started.server is not None:
        started.server.stop()
        pid = str(started.server.process.pid)
        assert leftovers(engine, {L.OWNER_PID: pid}) == []


def served(run: Run, model: ScriptedModel, tmp_path: Path) -> OpenAI:
    run.server = start_server(
        tmp_path / "serve",
        "--ask-origins",
        "--ask-timeout",
        "60",
        "--allow-internal",  # the origin server's network (private, like an intranet)
        run.origin.subnet,
        env={"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model.base_url},
    )
    return run.server.client()


def check_session(
    run: Run, decision: str, tmp_path: Path, *, use_async: bool = False
) -> Image.Image:
    """Run one session answering ``decision`` (with the async client's stream when
    ``use_async``); check what every decision left in the log and that deleting the session
    leaves nothing; the screenshot the model received after the answer."""
    with ScriptedModel(parse_script(browse_script()), on_turn=run.on_turn) as model:
        client = served(run, model, tmp_path)
        if use_async:
            assert run.server is not None
            session_id, events = asyncio.run(
                closing_async(run.server.async_client(), run, decision)
            )
        else:
            session_id, events = run_session(run, client, decision)
        assert types(events)[-2:] == ["agent.session.turn.completed", "agent.session.idle"]
        model.assert_finished()
    items = [i.to_dict() for i in client.beta.agents.sessions.items.list(session_id, order="asc")]
    calls = [i for i in items if i["type"] == "computer_use_call"]
    for index, call in enumerate(calls):  # what the model saw, kept for a failure's reader
        screenshot_of(call).save(tmp_path / f"call-{index}.jpg")
    assert run.decided.is_set(), (run.answered, tmp_path)
    assert (f"http://{HOST}", decision) in run.answered
    assert [c["status"] for c in calls] == ["completed"] * 3, calls
    assert run.sandbox_id is not None
    by = f"cubicle serve session {session_id}"
    logged = {
        (a.get("origin"), a.get("answer"), a.get("by")) for a in egress_answers(run.sandbox_id)
    }
    for asked, verdict in run.answered:
        assert (asked, verdict, by) in logged, (asked, verdict, logged)
    # ... and in the turn's trajectory and its report ("Origin access")
    assert run.server is not None
    end = events[-2]
    assert end.type == "agent.session.turn.completed"
    folder = run.server.data_dir / "sessions" / session_id / end.turn_id
    recorded = {
        (e["origin"], e["answer"], e["by"])
        for e in read_trajectory(folder)
        if e["kind"] == "origin_access"
    }
    assert {(asked, verdict, by) for asked, verdict in run.answered} <= recorded, recorded
    report = (folder / "report.html").read_text(encoding="utf-8")
    assert "Origin access" in report and f"http://{HOST}" in report
    assert_deleted(run.engine, run.server, client, session_id, run.sandbox_id)
    return screenshot_of(calls[2])


def test_approving_the_origin_lets_the_browser_show_the_page(run: Run, tmp_path: Path) -> None:
    shot = check_session(run, "approve", tmp_path)
    assert ("asked.test", "/page") in [(h, p) for h, _port, p in run.origin.seen()]
    assert run.window is not None
    assert near_share(shot, run.window, GREEN) > 0.5, run.answered


def test_denying_the_origin_keeps_the_browser_off_it(run: Run, tmp_path: Path) -> None:
    shot = check_session(run, "deny", tmp_path)
    assert run.origin.seen() == []
    assert run.window is not None
    assert near_share(shot, run.window, GREEN) < 0.01, run.answered


def test_cancel_through_the_async_client_refuses_this_time(run: Run, tmp_path: Path) -> None:
    """The async client's stream and answers; cancel refuses the request (not remembered: the
    proxy would ask again)."""
    shot = check_session(run, "cancel", tmp_path, use_async=True)
    assert run.origin.seen() == []
    assert run.window is not None
    assert near_share(shot, run.window, GREEN) < 0.01, run.answered


SETUP_FETCH = (
    "python3 -c \"import urllib.request; urllib.request.urlopen('http://asked.test/setup', "
    'timeout=50)"'
)


def test_a_setup_command_asking_for_an_origin_is_refused_at_once(run: Run, tmp_path: Path) -> None:
    """No turn runs during the setup commands: the question is cancelled by the session at once
    (not held until the proxy's timeout denies it for good), so the command fails naming it."""
    with ScriptedModel(parse_script(browse_script()), raise_on_exit=False) as model:
        client = served(run, model, tmp_path)
        session = client.beta.agents.sessions.create(
            environment={**ENVIRONMENT, "setup_commands": [{"command": SETUP_FETCH}]},
            agent=AGENT,
        )
        with client.beta.agents.sessions.events.stream(session.id) as stream:
            for event in stream:
                if event.type == "agent.session.failed":
                    break
        failed = client.beta.agents.sessions.retrieve(session.id)
        assert failed.error is not None and "setup_commands[0]" in failed.error, failed.error
        assert run.server is not None
        sandbox_id = sandbox_of(run.engine, run.server)
        answers = [(a["origin"], a["answer"], a["by"]) for a in egress_answers(sandbox_id)]
        assert answers == [
            ("http://asked.test", "cancel", f"cubicle serve session {session.id}")
        ], answers
        assert run.origin.seen() == []
        assert_deleted(run.engine, run.server, client, session.id, sandbox_id)
