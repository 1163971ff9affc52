"""401, 400, 404 and 501 in the API's error shape, through the real openai client; the token,
loopback and the error shape of the raw wire."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from tests.serve.conftest import REPO, TOKEN, Server, api_server, start_server
from tests.support.serve_process import serve_argv

__all__ = ["api_server"]

ENV: dict[str, Any] = {"type": "openai_hosted", "desktop": {"enabled": True}}


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body
    assert isinstance(body, dict) and {"message", "type", "param", "code"} <= set(body), body
    return body


def test_wrong_or_missing_token_is_401(api_server: Server) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        api_server.client("wrong-token-0123456789").beta.agents.sessions.list()
    assert error_of(caught.value)["code"] == "invalid_api_key"
    raw = httpx2.get(api_server.base_url + "/agents/sessions")
    assert raw.status_code == 401
    assert raw.json()["error"]["code"] == "missing_api_key"
    # unknown endpoints are not revealed without the token either
    assert httpx2.get(api_server.base_url + "/agents/sessions/x/turns").status_code == 401


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"environment": {"type": "none"}}, "environment.type"),
        ({"environment": {"type": "self_hosted", "workspace_directory": "/w"}}, "environment.type"),
        ({"environment": {**ENV, "desktop": {"enabled": False}}}, "environment.desktop.enabled"),
        (
            {"environment": {**ENV, "network": {"access": "restricted"}}},
            "environment.network.allowed_domains",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "network": {"access": "restricted", "allowed_domains": ["exa mple.com"]},
                }
            },
            "environment.network.allowed_domains",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "network": {
                        "access": "restricted",
                        "allowed_domains": ["a.com"],
                        "blocked_domains": ["x.com"],
                    },
                }
            },
            "environment.network.blocked_domains",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "network": {"access": "restricted", "blocked_domains": ["x.com:443"]},
                }
            },
            "environment.network.blocked_domains",
        ),
        (
            {"environment": {**ENV, "network": {"access": "enabled", "blocked_domains": ["x"]}}},
            "environment.network.blocked_domains",
        ),
        (
            {"environment": {**ENV, "network": {"access": "sometimes"}}},
            "environment.network.access",
        ),
        ({"environment": {**ENV, "packages": {"python": ["requests"]}}}, "environment.packages"),
        ({"environment": {**ENV, "environment_id": "env_1"}}, "environment.environment_id"),
        (
            {"environment": {**ENV, "skills": [{"type": "skill_reference", "skill_id": "s"}]}},
            "environment.skills",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "files": [{"type": "file_id", "file_id": "f", "path": "/workspace/a"}],
                }
            },
            "environment.files[0].type",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "files": [{"type": "inline", "data": "aGk=", "path": "/etc/passwd"}],
                }
            },
            "environment.files[0].path",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "files": [{"type": "inline", "data": "aGk=", "path": "/workspace/../etc/x"}],
                }
            },
            "environment.files[0].path",
        ),
        (
            {
                "environment": {
                    **ENV,
                    "files": [{"type": "inline", "data": "not base64!", "path": "/workspace/a"}],
                }
            },
            "environment.files[0].data",
        ),
        ({"environment": {**ENV, "env": {"BAD NAME": "x"}}}, "environment.env.BAD NAME"),
        (
            {"environment": {**ENV, "setup_commands": [{"command": "true", "cwd": "/tmp"}]}},
            "environment.setup_commands[0].cwd",
        ),
        ({"environment": {**ENV, "container_size": "huge"}}, "environment.container_size"),
        ({"environment": ENV, "agent": {"model": "gpt-5.4"}}, "agent.model"),
        ({"environment": ENV, "agent": {"model": "cubicle-task:no-such-task"}}, "agent.model"),
        (
            {
                "environment": ENV,
                "agent": {"model": "cubicle-drill", "reasoning": {"effort": "high"}},
            },
            "agent.reasoning",
        ),
        (
            {
                "environment": ENV,
                "agent": {"model": "cubicle-drill", "tools": [{"type": "web_search"}]},
            },
            "agent.tools[0]",
        ),
        ({"environment": ENV, "agent_id": "agent_1"}, "agent_id"),
        (
            {
                "environment": ENV,
                "agent": {
                    "model": "cubicle-drill",
                    "tools": [{"type": "computer_use", "include_screenshots": "yes"}],
                },
            },
            "agent.tools[0].include_screenshots",
        ),
        (
            {"environment": ENV, "agent": {"model": "cubicle-drill"}, "review": "auto_review"},
            "review",
        ),
        (
            {"environment": ENV, "agent": {"model": "cubicle-drill"}, "vault_ids": ["v"]},
            "vault_ids",
        ),
        ({"environment": ENV, "agent": {"model": "cubicle-drill"}, "stream": True}, "input"),
    ],
)
def test_bad_create_is_400_naming_the_field(
    api_server: Server, kwargs: dict[str, Any], param: str
) -> None:
    client = api_server.client()
    kwargs.setdefault("agent", {"model": "cubicle-drill"})
    with pytest.raises(openai.BadRequestError) as caught:
        client.beta.agents.sessions.create(**kwargs)
    body = error_of(caught.value)
    assert body["param"] == param, body
    assert param.rsplit(".", 1)[-1].split("[", 1)[0] in body["message"]
    assert client.beta.agents.sessions.list().data == []  # nothing was created


def test_unknown_session_is_404(api_server: Server) -> None:
    client = api_server.client()
    for call in (
        lambda: client.beta.agents.sessions.retrieve("sess_nope"),
        lambda: client.beta.agents.sessions.update("sess_nope", metadata={}),
        lambda: client.beta.agents.sessions.delete("sess_nope"),
        lambda: client.beta.agents.sessions.items.list("sess_nope"),
        lambda: client.beta.agents.sessions.events.create(
            "sess_nope", events=[{"type": "agent.session.input.cancel"}]
        ),
        lambda: client.beta.agents.sessions.events.stream("sess_nope"),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert error_of(caught.value)["code"] == "not_found"
        assert "sess_nope" in error_of(caught.value)["message"]


def test_unimplemented_endpoints_answer_501_in_the_error_shape(api_server: Server) -> None:
    client = api_server.client()
    for call in (
        lambda: client.beta.agents.sessions.turns.list("sess_x"),
        lambda: client.beta.agents.sessions.artifacts.list("sess_x"),
        lambda: client.beta.agents.create(model="m"),
    ):
        with pytest.raises(openai.APIStatusError) as caught:
            call()
        assert caught.value.status_code == 501
        body = error_of(caught.value)
        assert (
            body["code"] == "not_implemented"
            and "cubicle serve does not implement" in body["message"]
        )


def test_bad_list_parameters_are_400(api_server: Server) -> None:
    client = api_server.client()
    for kwargs, param in (
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"after": "sess_x"}, "after"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client.beta.agents.sessions.list(**kwargs)
        assert error_of(caught.value)["param"] == param
    raw = httpx2.get(
        api_server.base_url + "/agents/sessions?order=sideways",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "order"
    huge = httpx2.post(
        api_server.base_url + "/agents/sessions",
        content=b" " * (64 * 1024 * 1024 + 1),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=120,
    )
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "request_too_large"
    raw = httpx2.post(
        api_server.base_url + "/agents/sessions",
        content=b"{nope",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert raw.status_code == 400 and "JSON" in raw.json()["error"]["message"]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--host", "0.0.0.0"], ["--allow-remote", "0.0.0.0"]),
        (["--ask-timeout", "5"], ["--ask-timeout needs --ask-origins"]),
        (["--ask-origins", "--ask-timeout", "0"], ["ask timeout", "0.0"]),
        (["--ask-origins", "--ask-timeout", "86401"], ["ask timeout", "86401"]),
        (["--max-sessions", "0"], ["--max-sessions 0", "at least 1"]),
        (["--max-connections", "0"], ["--max-connections 0", "at least 1"]),
        (["--head-timeout", "0"], ["--head-timeout 0", "positive"]),
        (["--head-timeout", "nan"], ["--head-timeout nan", "positive"]),
        (["--max-connections", "10000000"], ["--max-connections 10000000", "RLIMIT_NOFILE"]),
        (["--allow-internal", "127.0.0.0/8"], ["internal network '127.0.0.0/8'", "loopback"]),
        (["--allow-internal", "10.0.0.1/8"], ["invalid internal network '10.0.0.1/8'"]),
    ],
)
def test_bad_server_options_are_refused_before_anything_starts(
    tmp_path: Path, options: list[str], words: list[str]
) -> None:
    data = tmp_path / "d"
    result = subprocess.run(
        serve_argv(data, *options),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert all(word in result.stderr for word in words), result.stderr
    assert not data.exists()


def test_generated_token_is_printed_once_and_works(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", env={"CUBICLE_API_TOKEN": ""})
    try:
        token_lines = [
            line for line in server.lines if "token" in line.lower() and "shown once" in line
        ]
        assert len(token_lines) == 1
        token = token_lines[0].split()[-1]
        assert len(token) > 30
        assert server.client(token).beta.agents.sessions.list().data == []
        with pytest.raises(openai.AuthenticationError):
            server.client(TOKEN).beta.agents.sessions.list()
    finally:
        server.stop()
