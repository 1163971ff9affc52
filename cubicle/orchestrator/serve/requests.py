"""The request bodies of ``cubicle serve`` as pydantic models, and their errors as 400 answers.

The models are cubicle's own, shaped as the installed ``openai`` package's request types
(``openai.types.beta.agents.session_create_params``, ``...sessions.event_create_params``) but
narrower where cubicle is: text parts only, the computer tool and function tools only. Those
TypedDicts are not validated directly because pydantic would accept keys they do not declare
(they cannot forbid extras), read ``compaction.async`` under its Python name ``async_`` (the
package's own ``PropertyInfo`` alias is invisible to pydantic) and validate ``Iterable`` fields
lazily, after the request was accepted.

Every model is strict (no coercion: ``"true"`` is no boolean) and refuses unknown fields.
:func:`validate` turns the first error into :func:`~cubicle.orchestrator.serve.errors.bad_request`
with ``param`` the field's dotted path (``agent.tools[0].include_screenshots``) and a message
that starts with it. What needs the server's state (a pending request's kind, the policy for
``auto_review``, a task's name) is checked by the routes after the shape.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from cubicle.orchestrator.serve.errors import bad_request

__all__ = [
    "AgentRequest",
    "ApprovalResult",
    "CancelInput",
    "CreateRequest",
    "EventsRequest",
    "FunctionTool",
    "InputEvent",
    "MessageInput",
    "ToolResult",
    "UpdateRequest",
    "UserMessage",
    "validate",
]

MAX_METADATA: Final = 16
"""Metadata pairs at most (keys up to 64 characters, values up to 512)."""

Model = TypeVar("Model", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _unsupported(value: Any) -> Any:
    """Fields cubicle cannot honour: accepted when empty (null, ``[]``, ``{}``)."""
    if value not in (None, [], {}):
        raise ValueError("is not supported by cubicle serve")
    return value


Unsupported = Annotated[Any, AfterValidator(_unsupported)]


# -- messages --------------------------------------------------------------------------------------


class InputText(_Body):
    """A text part: the only content cubicle agents take."""

    type: Literal["input_text"]
    text: str

    @model_validator(mode="before")
    @classmethod
    def _text_only(cls, value: Any) -> Any:
        if isinstance(value, dict) and value.get("type") != "input_text":
            raise ValueError("cubicle agents take input_text parts only")
        return value


def _text_shorthand(value: Any) -> Any:
    """A string is one text part."""
    return [{"type": "input_text", "text": value}] if isinstance(value, str) else value


class UserMessage(_Body):
    """One user message: a string or a non-empty list of text parts."""

    role: Literal["user"]
    content: Annotated[list[InputText], BeforeValidator(_text_shorthand), Field(min_length=1)]
    type: Literal["message"] | None = None


def _message_shorthand(value: Any) -> Any:
    """A string is one user message (an empty one is refused)."""
    if value == "":
        raise ValueError("must not be empty")
    return [{"role": "user", "content": value}] if isinstance(value, str) else value


Messages = Annotated[list[UserMessage], BeforeValidator(_message_shorthand), Field(min_length=1)]
"""An ``input``: a string or a non-empty list of user messages."""


def content_of(messages: list[UserMessage]) -> list[dict[str, Any]]:
    """The text parts of ``messages`` in order, as the wire writes them."""
    parts = [part for message in messages for part in message.content]
    return [{"type": "input_text", "text": part.text} for part in parts]


# -- create ----------------------------------------------------------------------------------------


def _limit(value: Any) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"must be a positive whole number of USD cents or null, got {value!r}")
    return value


class SpendControl(_Body):
    """``{"limit": N}`` (USD cents) or ``{"limit": null}`` (unlimited). A number needs a price
    for the session's model: :func:`cubicle.orchestrator.serve.spend.check_limit`."""

    limit: Annotated[Any, AfterValidator(_limit)]


class StreamOptions(_Body):
    include_obfuscation: bool | None = None


def _metadata_keys(value: dict[str, str]) -> dict[str, str]:
    for key in value:
        if len(key) > 64:
            raise ValueError(f"key {key[:16]!r}... is longer than 64 characters")
    return value


Metadata = Annotated[
    dict[str, Annotated[str, Field(max_length=512)]],
    Field(max_length=MAX_METADATA),
    AfterValidator(_metadata_keys),
]


class CreateRequest(_Body):
    """``POST /v1/agents/sessions``. ``environment`` is read by
    :func:`~cubicle.orchestrator.serve.environment.parse_environment`, ``agent``/``agent_id``
    by :func:`~cubicle.orchestrator.serve.agents.parse_agent` (each naming its own fields)."""

    environment: Any = None
    agent: Any = None
    agent_id: Any = None
    input: Messages | None = None
    metadata: Metadata | None = None
    prompt_cache_options: Unsupported = None
    review: Literal["none", "auto_review"] = "none"
    spend_control: SpendControl | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    vault_ids: Unsupported = None


class UpdateRequest(_Body):
    """``POST /v1/agents/sessions/{id}`` (``sessions.update``): an omitted field stays as it
    is (:attr:`model_fields_set` tells omitted from null)."""

    metadata: Metadata | None = None
    spend_control: SpendControl | None = None
    agent: Unsupported = None
    prompt_cache_options: Unsupported = None
    review: Unsupported = None
    vault_ids: Unsupported = None


# -- agent -----------------------------------------------------------------------------------------


class ComputerTool(_Body):
    """``{"type": "computer_use", "include_screenshots": bool}``: the computer tool."""

    type: Literal["computer_use"]
    include_screenshots: bool = True


FUNCTION_NAME: Final = r"^[A-Za-z0-9_-]{1,64}$"
"""A function tool's name, as the Responses API takes it."""


def _function_name(value: str) -> str:
    if not re.fullmatch(FUNCTION_NAME, value):
        raise ValueError(
            f"must be 1 to 64 letters, digits, underscores or dashes, got {value[:80]!r}"
        )
    return value


def _object_schema(value: dict[str, Any]) -> dict[str, Any]:
    """A function's ``parameters``: a JSON Schema of an object (``type: "object"``) whose
    ``properties`` are schemas and whose ``required`` names some of them."""
    if value.get("type") != "object":
        raise ValueError(
            f'must be a JSON Schema of an object ("type": "object"), got type {value.get("type")!r}'
        )
    properties = value.get("properties", {})
    if not isinstance(properties, dict) or not all(
        isinstance(schema, dict | bool) for schema in properties.values()
    ):
        raise ValueError("must have properties that map each name to a JSON Schema")
    required = value.get("required", [])
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        raise ValueError("must have required as a list of property names")
    missing = [name for name in required if name not in properties]
    if missing:
        raise ValueError(f"requires {missing[0]!r}, which is not among its properties")
    return value


def _only_false(value: bool | None) -> bool | None:
    if value:
        raise ValueError("is not supported by cubicle serve (send false or leave it out)")
    return value


class FunctionTool(_Body):
    """A function tool the application answers (``agent.session.input.tool_result``), as
    ``openai.types.beta.agent_tool_param.AgentToolConfigParamFunction`` declares it; deferred
    loading and ``async`` functions are not supported."""

    type: Literal["function"]
    name: Annotated[str, AfterValidator(_function_name)]
    description: str
    parameters: Annotated[dict[str, Any], AfterValidator(_object_schema)]
    defer_loading: Annotated[bool | None, AfterValidator(_only_false)] = None
    async_: Annotated[bool | None, AfterValidator(_only_false)] = Field(None, alias="async")


def _tool_kind(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return str(kind) if kind in ("computer_use", "function") else None


Tool = Annotated[
    Annotated[ComputerTool, Tag("computer_use")] | Annotated[FunctionTool, Tag("function")],
    Discriminator(
        _tool_kind,
        custom_error_type="tool_type",
        custom_error_message="must be the computer tool (type computer_use) or a function tool "
        "(type function); cubicle agents have no other tools",
    ),
]


def _unique_names(tools: list[ComputerTool | FunctionTool]) -> list[ComputerTool | FunctionTool]:
    names = [tool.name for tool in tools if isinstance(tool, FunctionTool)]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"declares the function {name!r} twice; names must be unique")
    if sum(isinstance(tool, ComputerTool) for tool in tools) > 1:
        raise ValueError("declares the computer tool twice")
    return tools


class Compaction(_Body):
    """Accepted and ignored: compaction is always blocking."""

    async_: bool | None = Field(None, alias="async")


def _model_name(value: str) -> str:
    if not value.strip():
        raise ValueError("must name a model")
    return value


class AgentBody(_Body):
    """A create request's ``agent``."""

    model: Annotated[str, AfterValidator(_model_name)]
    instructions: str | None = None
    tools: Annotated[list[Tool], AfterValidator(_unique_names)] | None = None
    compaction: Compaction | None = None
    reasoning: Unsupported = None
    text: Unsupported = None
    multi_agent: Unsupported = None
    service_tier: Unsupported = None
    experimental: Unsupported = None


def _no_saved_agent(value: Any) -> Any:
    if value is not None:
        raise ValueError("saved agents are not available in cubicle serve; send agent.model")
    return value


class AgentRequest(_Body):
    """The agent fields of a create request (the other fields are ignored here)."""

    model_config = ConfigDict(extra="ignore")

    agent_id: Annotated[Any, AfterValidator(_no_saved_agent)] = None
    agent: AgentBody


# -- events ----------------------------------------------------------------------------------------


class MessageInput(_Body):
    type: Literal["agent.session.input.message"]
    input: Messages


class CancelInput(_Body):
    type: Literal["agent.session.input.cancel"]


class ApprovalResponse(_Body):
    """An answer to a ``computer_use_approval_request``; its ``type`` must be the request's kind
    (checked by the route, which knows the request)."""

    type: str
    decision: Literal["approve", "deny", "cancel"]


class SigninFieldValue(_Body):
    """One submitted sign-in value (sensitive: never echoed in an error)."""

    field_id: str
    value: str


class SigninResponse(_Body):
    """An answer to a ``browser_authentication`` request: ``submit`` (``fields``, and
    ``selected_option`` when the request offers options) or ``cancel`` (neither)."""

    type: Literal["browser_authentication"]
    action: Literal["submit", "cancel"]
    fields: list[SigninFieldValue] | None = None
    selected_option: str | None = None


def _response_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "signin_answer" if kind == "browser_authentication" else "decision_answer"


class ApprovalResult(_Body):
    type: Literal["agent.session.input.computer_use_approval_request_result"]
    request_id: str
    response: Annotated[
        Annotated[ApprovalResponse, Tag("decision_answer")]
        | Annotated[SigninResponse, Tag("signin_answer")],
        Discriminator(_response_kind),
    ]


class OutputText(_Body):
    type: Literal["input_text"]
    text: str


class OutputImage(_Body):
    type: Literal["input_image"]
    image_url: str


OutputPart = Annotated[OutputText | OutputImage, Discriminator("type")]


def _output_kind(value: Any) -> str:
    return "output_text" if isinstance(value, str) else "output_parts"


Output = Annotated[
    Annotated[str, Tag("output_text")] | Annotated[list[OutputPart], Tag("output_parts")],
    Discriminator(_output_kind),
]


class ToolResult(_Body):
    """The result of a pending ``function_call``: ``success`` with its ``output`` (text, or
    text/image parts; null is empty text), or a failure with its ``error`` (``output`` then null
    or left out)."""

    type: Literal["agent.session.input.tool_result"]
    turn_id: str
    call_id: str
    success: bool
    output: Output | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _output_or_error(self) -> ToolResult:
        if self.success and self.error is not None:
            raise ValueError("error must be null when success is true")
        if not self.success and self.output is not None:
            raise ValueError("output must be null when success is false (say why in error)")
        return self


def _no_mcp(value: str) -> str:
    raise ValueError(f"is {value!r}: cubicle agents have no MCP tools")


class _McpInput(BaseModel):
    """Answers about MCP tools, which cubicle agents do not have: always refused."""

    model_config = ConfigDict(extra="allow")

    type: Annotated[
        Literal["agent.session.input.mcp_approval_request_result"], AfterValidator(_no_mcp)
    ]


INPUT_TYPES: Final = (
    "agent.session.input.message",
    "agent.session.input.cancel",
    "agent.session.input.computer_use_approval_request_result",
    "agent.session.input.tool_result",
    "agent.session.input.mcp_approval_request_result",
)
"""The ``type`` of every session input the API defines (pydantic names them in error paths)."""
_TAGS: Final = (
    *INPUT_TYPES,
    "computer_use",
    "function",
    "output_text",
    "output_parts",
    "decision_answer",
    "signin_answer",
)
"""Union tags pydantic puts in error paths, left out of ``param``."""

InputEvent = Annotated[
    MessageInput | CancelInput | ApprovalResult | ToolResult | _McpInput,
    Discriminator("type"),
]


class EventsRequest(_Body):
    """``POST /v1/agents/sessions/{id}/events``."""

    events: Annotated[list[InputEvent], Field(min_length=1)]


# -- errors ----------------------------------------------------------------------------------------


def param_of(loc: tuple[int | str, ...]) -> str:
    """``("agent", "tools", 0, "type")`` → ``agent.tools[0].type`` (union tags left out)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part not in _TAGS:
            text += f".{part}" if text else part
    return text


def _message(error: ErrorDetails) -> tuple[str, str]:
    """``(param, message)`` of one pydantic error; the message starts with the param."""
    loc = tuple(part for part in error["loc"] if part != "[key]")  # a dict key: the key's path
    kind = error["type"]
    param = param_of(loc)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        param = f"{param}.type"
        found = error.get("input", {}).get("type") if isinstance(error["input"], dict) else None
        part = "output" in loc
        what = "output part (input_text or input_image)" if part else "session input"
        if found is None:
            return param, f"{param} is required (the kind of {what})"
        return param, f"{param} {found!r} is not {'an' if part else 'a'} {what}"
    if kind == "missing":
        return param, f"{param} is required"
    if kind == "extra_forbidden":
        return param, f"{param} is not a known field"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return param, f"{param} must be an object"
    if kind == "too_short":
        return param, f"{param} must not be empty"
    if kind == "too_long":
        return param, f"{param} has more than {error.get('ctx', {}).get('max_length')} entries"
    if kind == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", ""))
        choice = "one of " if " or " in expected else ""
        return param, f"{param} must be {choice}{expected}, got {error['input']!r}"
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Input ")
    joint = " " if message.startswith(("must ", "is ", "should ")) else ": "
    return param, f"{param}{joint}{message}"


def validate(model: type[Model], body: dict[str, Any]) -> Model:
    """``body`` as ``model``.

    :raises ApiError: 400 naming the first wrong field (``param``, the start of the message).
    """
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        param, message = _message(exc.errors(include_url=False)[0])
        raise bad_request(message, param) from None
