"""Bad request bodies are 400s naming the field (``param``, and the message starts with it),
through the real ``openai`` client against the real app in this process; nothing is created or
applied. The request models declare the fields the installed ``openai`` package sends.

Nothing here starts a sandbox: events go to a session put in the server's store with no worker
(the body is read before the worker is looked up).
"""

from __future__ import annotations

from typing import Any, get_args, get_type_hints

import httpx2
import openai
import pytest
from openai.types.beta.agents.session_create_params import Agent, SessionCreateParamsBase
from openai.types.beta.agents.sessions.event_create_params import EventCreateParams
from openai.types.beta.environment_param import (
    EnvironmentParam,
    EnvironmentParamNone,
    EnvironmentParamOpenAIHosted,
    EnvironmentParamOpenAIHostedDesktop,
    EnvironmentParamOpenAIHostedNetwork,
    EnvironmentParamOpenAIHostedPackages,
    EnvironmentParamSelfHosted,
)
from openai.types.beta.hosted_environment_file_param import (
    HostedEnvironmentFileParam,
    HostedEnvironmentFileParamFileID,
    HostedEnvironmentFileParamInline,
)
from openai.types.beta.setup_command_param import SetupCommandParam

from cubicle.orchestrator.serve.environment import (
    SIZES,
    DesktopBody,
    EnvironmentBody,
    EnvironmentPlan,
    InlineFileBody,
    NetworkBody,
    PackagesBody,
    SetupCommandBody,
    parse_environment,
)
from cubicle.orchestrator.serve.requests import AgentBody, CreateRequest, EventsRequest
from cubicle.orchestrator.serve.store import Session
from tests.serve.test_wire import make_session
from tests.serve.test_wire_client import AGENT, ENV, TOKEN, Served, create, served

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


def inline(path: str = "/workspace/a.txt", data: object = "aGk=", **extra: Any) -> dict[str, Any]:
    return {"type": "inline", "path": path, "data": data, **extra}


def restricted(**network: Any) -> dict[str, Any]:
    return {**ENV, "network": {"access": "restricted", **network}}


@pytest.mark.parametrize(
    ("environment", "param", "words"),
    [
        # the environment itself, its kind and the desktop
        ("desktop", "environment", "must be an object"),
        ({"desktop": {"enabled": True}}, "environment.type", "is required"),
        ({"type": "none"}, "environment.type", "'none', which cubicle serve does not support"),
        ({**ENV, "desktop": {"enabled": False}}, "environment.desktop.enabled",
         ": cubicle sessions always run on a desktop; disabling it is not supported"),
        ({**ENV, "desktop": {"enabled": "yes"}}, "environment.desktop.enabled",
         "should be a valid boolean"),
        ({**ENV, "desktop": {"enabled": True, "gpu": 1}}, "environment.desktop.gpu",
         "is not a known field"),
        ({**ENV, "colour": "red"}, "environment.colour", "is not a known field"),
        # network: shape, then what one field alone cannot say
        ({**ENV, "network": {"allowed_domains": ["a.test"]}}, "environment.network.access",
         "is required"),
        ({**ENV, "network": {"access": "sometimes"}}, "environment.network.access",
         "must be one of 'enabled', 'disabled' or 'restricted', got 'sometimes'"),
        (restricted(allowed_domains=["a.test", 3]), "environment.network.allowed_domains",
         "must be a list of strings"),
        (restricted(blocked_domains="b.test"), "environment.network.blocked_domains",
         "must be a list of strings"),
        (restricted(allowed_domains=["a.test"], proxy="p"), "environment.network.proxy",
         "is not a known field"),
        ({**ENV, "network": {"access": "enabled", "allowed_domains": ["a.test"]}},
         "environment.network.allowed_domains", "needs access 'restricted' (got 'enabled')"),
        (restricted(), "environment.network.allowed_domains", "must name at least one domain"),
        (restricted(allowed_domains=["a.test"], blocked_domains=["b.test"]),
         "environment.network.blocked_domains", "cannot be combined with allowed_domains"),
        (restricted(blocked_domains=["b.test:443"]), "environment.network.blocked_domains",
         "b.test:443"),
        # fields cubicle cannot honour: refused unless empty, saying why
        ({**ENV, "packages": {"python": ["requests"]}}, "environment.packages",
         ": cubicle guests have no package installation"),
        ({**ENV, "packages": {"ruby": []}}, "environment.packages.ruby", "is not a known field"),
        ({**ENV, "environment_template_id": "t"}, "environment.environment_template_id",
         "templates are not available"),
        ({**ENV, "plugins": [{"type": "inline"}]}, "environment.plugins", "not supported"),
        ({**ENV, "capability_directories": ["/c"]}, "environment.capability_directories",
         "not supported"),
        # files, named by their index
        ({**ENV, "files": [inline(), inline("/workspace/b"), inline("/etc/passwd")]},
         "environment.files[2].path", ": '/etc/passwd' is not inside /workspace"),
        ({**ENV, "files": [inline("workspace/a")]}, "environment.files[0].path",
         "must be an absolute path inside /workspace"),
        ({**ENV, "files": [inline("/workspace/a/../b")]}, "environment.files[0].path",
         "must not contain '..'"),
        ({**ENV, "files": [inline("/workspace/")]}, "environment.files[0].path",
         "is the workspace itself, not a file"),
        ({**ENV, "files": [inline(), inline(data="not base64!")]}, "environment.files[1].data",
         "is not valid standard base64"),
        ({**ENV, "files": [inline(data=5)]}, "environment.files[0].data", "must be base64 text"),
        ({**ENV, "files": [{"type": "file_id", "file_id": "f", "path": "/workspace/a"}]},
         "environment.files[0].type", "need the OpenAI Files API"),
        ({**ENV, "files": [inline(type="url")]}, "environment.files[0].type",
         "must be 'inline', got 'url'"),
        ({**ENV, "files": [{"type": "inline", "data": "aGk="}]}, "environment.files[0].path",
         "is required"),
        ({**ENV, "files": [inline(mode=0o644)]}, "environment.files[0].mode",
         "is not a known field"),
        ({**ENV, "files": ["a.txt"]}, "environment.files[0]", "must be an object"),
        ({**ENV, "files": inline()}, "environment.files", "should be a valid list"),
        # env, named by the variable
        ({**ENV, "env": {"OK": "1", "X": 3}}, "environment.env.X", "should be a valid string"),
        ({**ENV, "env": {"1X": "v"}}, "environment.env.1X", "is not a valid variable name"),
        ({**ENV, "env": {"X": "a\x00b"}}, "environment.env.X", "must not contain NUL"),
        ({**ENV, "env": ["X=1"]}, "environment.env", "must be an object"),
        # setup commands, named by their index
        ({**ENV, "setup_commands": [{"command": "true"}, {"command": "  "}]},
         "environment.setup_commands[1].command", "must be a non-empty command"),
        ({**ENV, "setup_commands": [{"command": "ls", "cwd": "/tmp"}]},
         "environment.setup_commands[0].cwd", ": '/tmp' is not inside /workspace"),
        ({**ENV, "setup_commands": [{"command": "ls", "shell": "bash"}]},
         "environment.setup_commands[0].shell", "is not a known field"),
        ({**ENV, "setup_commands": [{"cwd": "/workspace"}]},
         "environment.setup_commands[0].command", "is required"),
        # container size
        ({**ENV, "container_size": "huge"}, "environment.container_size",
         "must be one of 'small', 'medium' or 'large', got 'huge'"),
        ({**ENV, "container_size": 2}, "environment.container_size", "got 2"),
    ],
)  # fmt: skip
def test_a_bad_environment_is_refused_naming_the_field(
    served: Served, environment: Any, param: str, words: str
) -> None:
    client = served.client()
    with pytest.raises(openai.BadRequestError) as caught:
        create(client, environment=environment)
    found, message = bad_request(caught)
    assert found == param
    assert message.startswith(param) and words in message, message
    assert client.beta.agents.sessions.list().data == []  # nothing was created


def test_empty_unsupported_fields_are_accepted_as_the_api_defaults_them() -> None:
    """``null``, ``[]`` and ``{}`` (and ``packages`` with empty lists, as the API returns it) are
    what the API means by leaving a field out: the plan is that of the bare environment."""
    plan = parse_environment(
        {
            **ENV,
            "environment_id": None,
            "packages": {"npm": [], "python": None, "system": []},
            "plugins": [],
            "skills": None,
            "capability_directories": [],
            "files": [],
            "env": {},
            "setup_commands": None,
            "network": None,
        }
    )
    bare = parse_environment(ENV)
    assert (plan.network, plan.access, plan.files, plan.env, plan.setup_commands) == (
        bare.network,
        bare.access,
        [],
        {},
        [],
    )
    assert str(plan.network) == "none"


def test_a_valid_environment_maps_onto_the_plan() -> None:
    plan = parse_environment(
        {
            **ENV,
            "network": {"access": "restricted", "allowed_domains": ["a.test"]},
            "files": [inline("/workspace/d/a.txt", "aGk=")],
            "env": {"GREETING": "hi"},
            "setup_commands": [{"command": "ls"}, {"command": "pwd", "cwd": "/workspace/d"}],
            "container_size": "large",
        }
    )
    assert isinstance(plan, EnvironmentPlan)
    assert (str(plan.network), plan.access, plan.allowed_domains) == (
        "allow:a.test",
        "restricted",
        ["a.test"],
    )
    assert [(f.guest_path, f.data) for f in plan.files] == [
        ("/home/cubicle/workspace/d/a.txt", b"hi")
    ]
    assert [(r["path"], r["size_bytes"]) for r in plan.file_records] == [("/workspace/d/a.txt", 2)]
    assert plan.env == {"GREETING": "hi"}
    assert [(c.command, c.cwd) for c in plan.setup_commands] == [
        ("ls", "/home/cubicle/workspace"),
        ("pwd", "/home/cubicle/workspace/d"),
    ]
    assert (plan.cpus, plan.memory_mb) == (2.0, 4096)


def test_the_environment_models_declare_what_the_openai_package_sends() -> None:
    """A field, file kind, environment kind, access mode or size the installed ``openai`` adds
    to the session's ``environment`` fails here: cubicle then decides to map it or refuse it by
    name, instead of refusing it as an unknown field."""
    assert set(EnvironmentBody.model_fields) == keys(EnvironmentParamOpenAIHosted)
    assert set(DesktopBody.model_fields) == keys(EnvironmentParamOpenAIHostedDesktop)
    assert set(NetworkBody.model_fields) == keys(EnvironmentParamOpenAIHostedNetwork)
    assert set(PackagesBody.model_fields) == keys(EnvironmentParamOpenAIHostedPackages)
    assert set(InlineFileBody.model_fields) == keys(HostedEnvironmentFileParamInline)
    assert set(SetupCommandBody.model_fields) == keys(SetupCommandParam)
    # the kinds: openai_hosted is mapped, none and self_hosted refused by environment.type; files
    # inline are written, file_id refused by files[N].type
    assert get_args(EnvironmentParam) == (
        EnvironmentParamNone,
        EnvironmentParamOpenAIHosted,
        EnvironmentParamSelfHosted,
    )
    assert get_args(HostedEnvironmentFileParam) == (
        HostedEnvironmentFileParamFileID,
        HostedEnvironmentFileParamInline,
    )
    hosted = get_type_hints(EnvironmentParamOpenAIHosted)
    assert set(get_args(hosted["container_size"])) == set(SIZES)
    assert set(get_args(get_type_hints(EnvironmentParamOpenAIHostedNetwork)["access"])) == set(
        get_args(NetworkBody.model_fields["access"].annotation)
    )
