"""The sessions wire as the real ``openai`` client speaks it, with its default retries, against
``cubicle serve``'s app with every request counted on the server.

The server is the real app (:func:`cubicle.orchestrator.serve.app.build_app`) under uvicorn in this
process, behind an ASGI layer that counts each request it receives, so "the client asked once"
is read on the server, not assumed from the client's settings. Nothing here starts a sandbox.
"""

from __future__ import annotations

import collections
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import uvicorn
from openai import OpenAI
from starlette.types import ASGIApp, Receive, Scope, Send

from cubicle.orchestrator.serve.app import ServerState, build_app
from cubicle.orchestrator.serve.registry import Registry
from cubicle.orchestrator.serve.wire import MAX_TOOLS_BYTES

pytestmark = pytest.mark.newest

TOKEN = "wire-token-0123456789abcdef"
ENV: dict[str, Any] = {"type": "openai_hosted", "desktop": {"enabled": True}}
AGENT: dict[str, Any] = {"model": "cubicle-drill"}


class Counted:
    """ASGI layer that counts every HTTP request by ``(method, path)`` before the app sees it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            with self.lock:
                self.requests[(scope["method"], scope["path"])] += 1
        await self.app(scope, receive, send)

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return self.requests[(method, path)]


class Served:
    def __init__(self, counted: Counted, base_url: str, state: ServerState) -> None:
        self.counted = counted
        self.base_url = base_url
        self.state = state
        self.clients: list[OpenAI] = []

    def client(self, token: str = TOKEN) -> OpenAI:
        """A client with the SDK's default retries (``max_retries`` not set); closed with the
        server (an unclosed client's pooled socket would warn wherever it is collected)."""
        client = OpenAI(base_url=self.base_url, api_key=token, timeout=30)
        self.clients.append(client)
        return client


def create(client: OpenAI, **fields: Any) -> Any:
    """``sessions.create`` with the wire's fields as given (nothing else added)."""
    kwargs: dict[str, Any] = {"environment": ENV, "agent": AGENT, **fields}
    return client.beta.agents.sessions.create(**kwargs)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    registry = Registry.open(tmp_path / "data")
    state = ServerState(token=TOKEN, registry=registry)
    counted = Counted(build_app(state))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(
        uvicorn.Config(counted, log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    served = Served(counted, f"http://127.0.0.1:{sock.getsockname()[1]}/v1", state)
    try:
        yield served
    finally:
        for client in served.clients:
            client.close()
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        registry.close()
    assert not thread.is_alive(), "the in-process server did not stop"


def test_an_unimplemented_endpoint_is_asked_once_with_default_retries(served: Served) -> None:
    client = served.client()
    assert client.max_retries >= 1  # the SDK's default: it would retry a plain 501
    calls = (
        (lambda: client.beta.agents.sessions.turns.list("sess_x"), "GET", "sess_x/turns"),
        (lambda: client.beta.agents.sessions.artifacts.list("sess_x"), "GET", "sess_x/artifacts"),
    )
    for call, method, tail in calls:
        with pytest.raises(openai.InternalServerError) as caught:
            call()
        assert caught.value.status_code == 501
        assert caught.value.response.headers["x-should-retry"] == "false"
        assert served.counted.count(method, f"/v1/agents/sessions/{tail}") == 1, tail


def test_refusals_are_asked_once_and_say_not_to_retry(served: Served) -> None:
    client = served.client()
    with pytest.raises(openai.AuthenticationError) as caught:
        served.client("wrong-token-0123456789").beta.agents.sessions.list()
    assert caught.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.NotFoundError) as missing:
        client.beta.agents.sessions.retrieve("sess_nope")
    assert missing.value.response.headers["x-should-retry"] == "false"
    assert served.counted.count("GET", "/v1/agents/sessions") == 1
    assert served.counted.count("GET", "/v1/agents/sessions/sess_nope") == 1


@pytest.mark.parametrize(
    ("spend_control", "param"),
    [
        ({"limit": 500}, "spend_control.limit"),
        ({"limit": 1}, "spend_control.limit"),
        ({"limit": "500"}, "spend_control.limit"),
        ({}, "spend_control.limit"),
        ({"limit": None, "consumed": 3}, "spend_control.consumed"),
        ("unlimited", "spend_control"),
    ],
)
def test_a_spending_limit_is_refused_naming_the_field(
    served: Served, spend_control: Any, param: str
) -> None:
    client = served.client()
    with pytest.raises(openai.BadRequestError) as caught:
        create(client, spend_control=spend_control)
    body = caught.value.body
    assert isinstance(body, dict) and body["param"] == param, body
    assert param in body["message"]
    assert served.counted.count("POST", "/v1/agents/sessions") == 1
    assert client.beta.agents.sessions.list().data == []  # nothing was created


@pytest.mark.parametrize(
    ("compaction", "param"),
    [
        ({"async": "yes"}, "agent.compaction.async"),
        ({"mode": "background"}, "agent.compaction.mode"),
        ("blocking", "agent.compaction"),
    ],
)
def test_a_bad_compaction_is_refused_naming_the_field(
    served: Served, compaction: Any, param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        create(served.client(), agent={**AGENT, "compaction": compaction})
    body = caught.value.body
    assert isinstance(body, dict) and body["param"] == param, body


def test_a_tool_list_over_8_mib_is_refused_naming_agent_tools(served: Served) -> None:
    """At the limit the list is read entry by entry (this one's unknown field is the error);
    one byte over, the list is refused whole, naming ``agent.tools``."""

    def tools(pad: int) -> list[dict[str, Any]]:
        return [{"type": "computer_use", "pad": "x" * pad}]

    frame = len(json.dumps(tools(0), separators=(",", ":")).encode())
    for pad, param in (
        (MAX_TOOLS_BYTES - frame, "agent.tools[0].pad"),
        (MAX_TOOLS_BYTES - frame + 1, "agent.tools"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            create(served.client(), agent={**AGENT, "tools": tools(pad)})
        body = caught.value.body
        assert isinstance(body, dict) and body["param"] == param, (pad, body)
    # a lone surrogate (valid JSON, which the openai client cannot send): counted, still a 400
    raw = httpx2.post(
        served.base_url + "/agents/sessions",
        content=json.dumps(
            {
                "environment": ENV,
                "agent": {**AGENT, "tools": [{"type": "computer_use", "pad": "\ud800"}]},
            }
        ),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "agent.tools[0].pad", raw.text
