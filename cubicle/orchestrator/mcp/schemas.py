"""The input schema of every ``cubicle mcp`` tool, as a pydantic model (the one definition).

Each model is both the JSON schema the server lists (:func:`input_schema`) and the validator a
call's arguments pass before anything is done (:func:`parse_arguments`). Models are strict (a
``"5"`` is not an integer, a ``true`` is not one either) and forbid unknown fields, so a wrong
call is refused with :class:`BadArguments`, whose message names every wrong field. What the
schema cannot say (a network policy's grammar, a key name, a point outside the last screenshot)
is checked by the code it goes to (:class:`cubicle.orchestrator.network.NetworkPolicy`,
:mod:`cubicle.drivers.actions`), whose errors name the field too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from cubicle.orchestrator.mcp.files import MAX_PATH_CHARS, check_relative
from cubicle_guest import protocol

__all__ = [
    "BadArguments",
    "Click",
    "ClipboardGet",
    "ClipboardSet",
    "CreateSandbox",
    "DoubleClick",
    "Download",
    "Drag",
    "Exec",
    "Keypress",
    "Move",
    "NoArguments",
    "Point",
    "SandboxRef",
    "Scroll",
    "Type",
    "Upload",
    "Wait",
    "input_schema",
    "parse_arguments",
]

M = TypeVar("M", bound=BaseModel)
MAX_EXEC_TIMEOUT_S = 600.0
MAX_WAIT_MS = 60_000

SandboxId = Annotated[
    str,
    Field(
        pattern=r"^(dk|vm)-[0-9a-z]{1,32}$",
        description="the sandbox's id, as create_sandbox or list_sandboxes gave it",
    ),
]
Coordinate = Annotated[
    int, Field(ge=0, description="pixels from the left/top of the last screenshot")
]
Keys = Annotated[
    list[str] | None,
    Field(
        default=None,
        description='keys held during the action, e.g. ["SHIFT"] (names as in keypress)',
    ),
]


class BadArguments(ValueError):
    """A tool call's arguments do not fit its schema; the message names each wrong field."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoArguments(_Args):
    """No arguments."""


class CreateSandbox(_Args):
    """Every field optional."""

    backend: Literal["docker", "vm"] | None = Field(
        default=None, description="docker (default: the server's --backend) or vm"
    )
    network: str = Field(
        default="none",
        max_length=4096,
        description="network policy: none (default), open, allow:HOST[:PORT],... or block:NAME,...",
    )
    screen: str = Field(
        default="1280x800",
        pattern=r"^[1-9][0-9]{2,3}x[1-9][0-9]{2,3}$",
        description="screen size WIDTHxHEIGHT in pixels (default 1280x800)",
    )


class SandboxRef(_Args):
    sandbox_id: SandboxId


class Click(SandboxRef):
    x: Coordinate
    y: Coordinate
    button: Literal["left", "right", "wheel", "back", "forward"] = "left"
    keys: Keys


class DoubleClick(SandboxRef):
    x: Coordinate
    y: Coordinate
    keys: Keys


class Move(SandboxRef):
    x: Coordinate
    y: Coordinate
    keys: Keys


class Scroll(SandboxRef):
    x: Coordinate
    y: Coordinate
    scroll_x: int = Field(default=0, description="pixels to scroll right (negative: left)")
    scroll_y: int = Field(default=0, description="pixels to scroll down (negative: up)")
    keys: Keys


class Point(_Args):
    x: Coordinate
    y: Coordinate


class Drag(SandboxRef):
    path: list[Point] = Field(min_length=2, description="the points the pointer passes, in order")
    keys: Keys


class Type(SandboxRef):
    text: str = Field(max_length=protocol.MAX_TEXT_CHARS, description="the text to type")


class Keypress(SandboxRef):
    keys: list[str] = Field(
        min_length=1,
        description='a chord, pressed together: e.g. ["CTRL", "S"], ["ENTER"], ["ALT", "F4"]',
    )


class Wait(SandboxRef):
    ms: int = Field(default=1000, ge=0, le=MAX_WAIT_MS, description="milliseconds to wait")


class Exec(SandboxRef):
    argv: list[str] = Field(
        min_length=1,
        description='the program and its arguments, never through a shell: e.g. ["cat", "f.txt"]',
    )
    timeout_s: float = Field(
        default=60.0, gt=0, le=MAX_EXEC_TIMEOUT_S, description="seconds the program may run"
    )


LocalPath = Annotated[
    str,
    Field(max_length=MAX_PATH_CHARS),
    AfterValidator(check_relative),
]
GuestPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="a path in the sandbox; a relative one is the desktop user's home's",
    ),
]
Selection = Annotated[
    Literal["clipboard", "primary"],
    Field(description="clipboard (default: what Ctrl+C/Ctrl+V use) or primary (the selection)"),
]


class Upload(SandboxRef):
    local: LocalPath = Field(
        description="the file or folder to copy, relative to the server's files folder "
        "(no absolute path, no '..', no symbolic link)"
    )
    guest_path: GuestPath = Field(
        description="where to put it in the sandbox: an existing folder receives it under its "
        "own name, anything else is the copy's name (its folder must exist); relative: the "
        "desktop user's home's"
    )


class Download(SandboxRef):
    guest_path: GuestPath = Field(
        description="the file or folder to copy out of the sandbox; relative: the desktop "
        "user's home's"
    )
    local: LocalPath = Field(
        default=".",
        description="where to put it, relative to the server's files folder (default: the "
        "folder itself): an existing folder receives it under its own name, anything else is "
        "the copy's name (its folder must exist)",
    )


def _fits_the_clipboard(text: str) -> str:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode: {exc.reason}") from None
    if size > protocol.MAX_CLIPBOARD_BYTES:
        raise ValueError(f"{size} bytes of UTF-8, over the limit of {protocol.MAX_CLIPBOARD_BYTES}")
    return text


class ClipboardGet(SandboxRef):
    selection: Selection = "clipboard"


class ClipboardSet(SandboxRef):
    text: Annotated[
        str,
        Field(
            max_length=protocol.MAX_CLIPBOARD_BYTES,
            description="the text (UTF-8, at most "
            f"{protocol.MAX_CLIPBOARD_BYTES} bytes) a paste in any application will receive",
        ),
        AfterValidator(_fits_the_clipboard),
    ]
    selection: Selection = "clipboard"


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema a tool lists for ``model`` (an object schema; unknown fields refused)."""
    schema = model.model_json_schema()
    schema.setdefault("properties", {})
    schema.pop("title", None)
    return schema


def _describe(error: Any) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "arguments"
    if error["type"] == "missing":
        return f"{where}: required"
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown field"
    return f"{where}: {error['msg']} (got {error['input']!r:.60})"


def parse_arguments(tool: str, model: type[M], arguments: object) -> M:
    """``arguments`` validated as ``model``.

    :raises BadArguments: naming the tool and each wrong field (``path.1.x: ...``).
    """
    try:
        return model.model_validate(arguments or {})
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors())
        raise BadArguments(f"{tool}: invalid arguments: {problems}") from None
