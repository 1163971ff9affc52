"""Task files: what a run asks the model, how the guest starts, and how success is checked.

A task file is TOML (``tasks/*.toml`` ships a few)::

    name = "editor-save"                       # default: the file's stem
    description = "one line for tables"
    prompt = "Open the text editor ... save it as {WORKDIR}/note.txt"
    provider = "anthropic"                     # openai (default) | anthropic | gemini
    model = "claude-sonnet-5"                  # default: the provider's default model

    [setup]                                    # all optional
    screen = "1280x800"                        # WxH
    network = "none"                           # none | open | allow:HOST[:PORT],...
    workdir = "~/task"                         # the task's guest folder ({WORKDIR})
    open = ["editor"]                          # panel apps to open before the first turn
    url = "http://127.0.0.1:{PORT}/"           # open in the browser before the first turn
    form_server = { port = 8765 }              # serve a form at /, the task's own pages
                                               # (/NAME.html: {WORKDIR}/NAME.html), store
                                               # the JSON a page posts to /submit

    [[setup.files]]                            # written before the first turn
    path = "data/input.txt"                    # relative to {WORKDIR}, or absolute, or ~/...
    content = "hello\\n"
    mode = 0o644                               # TOML octal, or "0644" (default 0644)
    [[setup.files]]                            # or a host file or folder, copied in as
    path = "data/"                             # `cubicle cp` does (Sandbox.upload: an
    source = "inputs/report.pdf"               # existing folder receives it), its modes and
                                               # mtimes kept; relative to the task file

    [[checks]]                                 # after the model's final message, all must hold
    file = "{WORKDIR}/note.txt"
    equals = "exact text\\n"                   # or: contains = "part"
    [[checks]]
    form = { name = "Zoë", city = "Tokyo" }    # the JSON the form server stored, exactly
    [[checks]]
    verifier = "package.module:function"       # function(agent_client) -> bool | Check | [Check]
    [[checks]]                                 # {TOOL_OUTPUT}: the latest function tool output
    file = "{WORKDIR}/answer.txt"              # the model received (equals/contains only)
    equals = "{TOOL_OUTPUT}"

    [signin]                                   # test credentials of the form server's sign-in
    email = "a@example.test"                   # site (/signin, then /code); given through the
    password = "..."                           # person's callback, never the model
    code = "123456"

    [limits]
    max_steps = 30                             # model requests at most
    stall = 8                                  # cubicle.drivers.stall; 0 off

    [scripted]                                 # the offline scripted model (cubicle drill)
    script = "editor-save.script.json"         # relative to the task file
    providers = { anthropic = "editor-save.anthropic.json" }   # the other providers' scripts
    model_view = [1024, 640]                   # what the scripted model sees of the screen
    tools = ["request_user_response"]          # function tools the script calls (serve only)

Placeholders ``{WORKDIR}``, ``{HOME}`` and ``{PORT}`` (the form server's port) are filled in the
prompt, the set-up paths and URL, the checks' paths and the script; file contents and expected
texts are taken literally. A malformed file raises :class:`TaskFileError` naming the file and
the field (``setup.files[0].mode: ...``).

Stable API (used by ``cubicle run``/``drill`` and ``cubicle serve``): :func:`load_task`,
:func:`shipped_tasks`, :class:`Task`, :class:`TaskFileError`, :data:`TASKS_DIR`.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.shipped import source_root

__all__ = [
    "DEFAULT_TASK",
    "MODEL_PROVIDERS",
    "TASKS_DIR",
    "Check",
    "HarborParts",
    "Limits",
    "ModelProviderName",
    "Scripted",
    "Setup",
    "SetupFile",
    "SigninCredentials",
    "Task",
    "TaskFileError",
    "load_task",
    "shipped_tasks",
]

TASKS_DIR: Final = source_root() / "tasks"
"""The shipped task files (``tasks/`` of the checkout)."""
DEFAULT_TASK: Final = "desktop"
"""The task ``cubicle drill`` runs without ``--task``/``--all``."""
PLACEHOLDERS: Final = ("{WORKDIR}", "{HOME}", "{PORT}")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_SIZE = re.compile(r"^([1-9][0-9]{2,4})x([1-9][0-9]{2,4})$")


class TaskFileError(ConfigError):
    """A task file cannot be used: unreadable, not TOML, or a field is wrong (named)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SetupFile(_Strict):
    """A file written into the guest before the first turn: ``content`` (text, ``mode``), or
    ``source``, a host file or folder copied in as it is (relative to the task file)."""

    path: str = Field(min_length=1)
    content: str | None = None
    source: str | None = Field(default=None, min_length=1)
    mode: int | None = None

    @model_validator(mode="after")
    def _content_or_source(self) -> Self:
        if (self.content is None) == (self.source is None):
            raise ValueError("give exactly one of content (text) or source (a host path)")
        if self.source is not None and self.mode is not None:
            raise ValueError("mode is for content; a source keeps its own modes")
        return self

    @property
    def file_mode(self) -> int:
        """The mode of a ``content`` file (default 0o644)."""
        return 0o644 if self.mode is None else self.mode

    @field_validator("mode", mode="before")
    @classmethod
    def _octal(cls, value: object) -> object:
        if isinstance(value, str):
            if not re.fullmatch(r"0?o?[0-7]{3,4}", value):
                raise ValueError(f"an octal mode like 0644 or 0o755, got {value!r}")
            return int(value.replace("o", ""), 8)
        return value

    @field_validator("mode")
    @classmethod
    def _mode_range(cls, value: int) -> int:
        if not 0 <= value <= 0o7777:
            raise ValueError(f"a file mode between 0 and 0o7777, got {oct(value)}")
        return value


class FormServer(_Strict):
    """Serve ``{WORKDIR}/form.html`` on guest loopback; ``POST /submit`` → ``form-data.json``."""

    port: int = Field(ge=1024, le=65535)


class Setup(_Strict):
    """The guest's starting state (all before the first model turn)."""

    screen: str = "1280x800"
    network: str = "none"
    workdir: str = "~/task"
    open: list[str] = Field(default_factory=list)
    url: str | None = None
    form_server: FormServer | None = None
    files: list[SetupFile] = Field(default_factory=list)

    @field_validator("screen")
    @classmethod
    def _screen(cls, value: str) -> str:
        if not _SIZE.match(value):
            raise ValueError(f"WIDTHxHEIGHT in pixels like 1280x800, got {value!r}")
        return value

    @field_validator("open")
    @classmethod
    def _apps(cls, value: list[str]) -> list[str]:
        known = [launcher.name for launcher in PANEL.launchers]
        for app in value:
            if app not in known:
                raise ValueError(f"unknown app {app!r}; the panel has {', '.join(known)}")
        if len(set(value)) != len(value):
            raise ValueError("an app is listed twice")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str) -> str:
        if not (value.startswith("/") or value == "~" or value.startswith("~/")):
            raise ValueError(f"an absolute guest path or one under ~/, got {value!r}")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|file|data|about):", value):
            raise ValueError(f"an http(s), file, data or about URL, got {value!r:.80}")
        return value

    @property
    def screen_size(self) -> tuple[int, int]:
        match = _SIZE.match(self.screen)
        assert match is not None
        return int(match.group(1)), int(match.group(2))

    @property
    def apps(self) -> list[str]:
        """The apps to open: ``open``, plus the browser when ``url`` is set."""
        if self.url is not None and "browser" not in self.open:
            return [*self.open, "browser"]
        return list(self.open)


class Check(_Strict):
    """One check: ``file`` with ``equals`` or ``contains``; or ``form``; or ``verifier``."""

    name: str | None = None
    file: str | None = None
    equals: str | None = None
    contains: str | None = None
    form: dict[str, str] | None = None
    verifier: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [
            kind
            for kind, present in (
                ("file", self.file is not None),
                ("form", self.form is not None),
                ("verifier", self.verifier is not None),
            )
            if present
        ]
        if len(kinds) != 1:
            raise ValueError(
                "a check is exactly one of: file (with equals or contains), form, verifier; "
                f"got {', '.join(kinds) or 'none'}"
            )
        if self.file is not None and (self.equals is None) == (self.contains is None):
            raise ValueError("a file check needs exactly one of equals or contains")
        if self.file is None and (self.equals is not None or self.contains is not None):
            raise ValueError("equals/contains belong to a file check")
        if self.verifier is not None and not re.fullmatch(
            r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", self.verifier
        ):
            raise ValueError(f"verifier must be module:function, got {self.verifier!r}")
        return self

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.file is not None:
            return f"file {self.file} {'equals' if self.equals is not None else 'contains'} text"
        if self.form is not None:
            return "form submitted in the browser"
        return f"verifier {self.verifier}"


ModelProviderName = Literal["openai", "anthropic", "gemini"]
"""Whose model a run talks to (``cubicle run --provider``, a task's ``provider``)."""
MODEL_PROVIDERS: Final[tuple[ModelProviderName, ...]] = ("openai", "anthropic", "gemini")


class Limits(_Strict):
    max_steps: int = Field(default=30, ge=1, le=1000)
    stall: int = Field(default=8, ge=0, le=1000)


class Scripted(_Strict):
    """The scripted model's part: its script (JSON, :mod:`cubicle.drivers.scripted_model`) and
    the function tools the script calls (``tools``: a session running the task must declare
    them; ``cubicle drill`` cannot run such a task, no user answers there)."""

    script: str = Field(min_length=1)
    model_view: list[int] = Field(default_factory=lambda: [1024, 640])
    tools: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]] = Field(
        default_factory=list
    )
    providers: dict[Literal["anthropic", "gemini"], Annotated[str, Field(min_length=1)]] = Field(
        default_factory=dict
    )
    """Scripts for the other providers' stand-ins
    (:mod:`cubicle.orchestrator.drill.provider_scripts`), relative to the task file."""

    @field_validator("model_view")
    @classmethod
    def _view(cls, value: list[int]) -> list[int]:
        if len(value) != 2 or not all(16 <= v <= 10_000 for v in value):
            raise ValueError(f"[width, height] in pixels, got {value!r}")
        return value


class SigninCredentials(_Strict):
    """A sign-in task's test credentials (``[signin]``): the form server's sign-in site
    (``/signin``, then ``/code``) accepts only these; with no person present (the drill) they are
    given through the person's sign-in callback, never the model
    (:func:`cubicle.orchestrator.modelrun.signin.credentials_callback`)."""

    email: str = Field(min_length=1, max_length=200)
    password: str = Field(min_length=1, max_length=200)
    code: str = Field(min_length=1, max_length=32)


class HarborParts(_Strict):
    """What a task loaded from a Harbor-shaped folder (:mod:`cubicle.orchestrator.harbor`) has
    beside a task file's fields: its folder (``tests/test.sh`` is its check, run in the guest;
    ``solution/solve.sh``, when there, its oracle) and the scripts' time limits."""

    folder: Path = Field(strict=False)
    verifier_timeout_s: float = Field(default=120.0, gt=0)
    agent_timeout_s: float = Field(default=600.0, gt=0)

    @property
    def tests(self) -> Path:
        return self.folder / "tests"

    @property
    def solution(self) -> Path:
        return self.folder / "solution"

    @property
    def has_solution(self) -> bool:
        return (self.solution / "solve.sh").is_file()


class Task(_Strict):
    """A validated task file. ``source`` is where it was read from (``None``: built in code)."""

    name: Annotated[str, Field(pattern=_NAME.pattern)]
    description: str = ""
    prompt: str = Field(min_length=1)
    setup: Setup = Setup()
    checks: list[Check] = Field(default_factory=list)
    limits: Limits = Limits()
    scripted: Scripted | None = None
    provider: ModelProviderName | None = None
    """Whose model runs the task (``cubicle run``; a ``--provider`` flag wins)."""
    model: str | None = Field(default=None, min_length=1)
    """The model's name (default: the provider's default model)."""
    signin: SigninCredentials | None = None
    source: Path | None = Field(default=None, strict=False)
    harbor: HarborParts | None = None
    """Set for a task read from a Harbor-shaped folder (never a task file's field)."""

    @property
    def port(self) -> int | None:
        return self.setup.form_server.port if self.setup.form_server is not None else None

    def placeholders(self, home: str) -> dict[str, str]:
        """The placeholder values for a guest whose user's home is ``home``."""
        workdir = self.setup.workdir
        if workdir == "~" or workdir.startswith("~/"):
            workdir = home + workdir[1:]
        values = {"{HOME}": home, "{WORKDIR}": workdir.rstrip("/") or "/"}
        values["{PORT}"] = str(self.port) if self.port is not None else "{PORT}"
        return values

    def source_path(self, item: SetupFile) -> Path:
        """The host path of ``item.source``: absolute, or relative to the task file's folder.

        :raises TaskFileError: it does not exist.
        """
        assert item.source is not None
        base = self.source.parent if self.source is not None else TASKS_DIR
        path = (base / Path(item.source).expanduser()).resolve()
        if not path.exists():
            raise TaskFileError(f"task {self.name}: setup.files source {path} does not exist")
        return path

    def script(self, provider: ModelProviderName = "openai") -> dict[str, Any]:
        """The scripted model's script for ``provider`` as written (placeholders unfilled).

        :raises TaskFileError: no ``[scripted]`` section, no script for ``provider``, or the
            script cannot be read.
        """
        if self.scripted is None:
            raise TaskFileError(
                f"task {self.name}: no [scripted] section, so it cannot run offline "
                "(cubicle drill needs a scripted model script)"
            )
        name = self.scripted.script
        if provider != "openai":
            if provider not in self.scripted.providers:
                raise TaskFileError(
                    f"task {self.name}: no {provider} script (scripted.providers.{provider}); "
                    f"it has scripts for: openai"
                    + "".join(f", {p}" for p in sorted(self.scripted.providers))
                )
            name = self.scripted.providers[provider]
        base = self.source.parent if self.source is not None else TASKS_DIR
        path = (base / name).resolve()
        try:
            value = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise TaskFileError(f"task {self.name}: scripted.script {path}: {exc}") from None
        if not isinstance(value, dict):
            raise TaskFileError(f"task {self.name}: scripted.script {path} is not a JSON object")
        return value


def fill(value: Any, replacements: Mapping[str, str]) -> Any:
    """``value`` (str, list, dict, nested) with each placeholder replaced."""
    if isinstance(value, str):
        for token, text in replacements.items():
            value = value.replace(token, text)
        return value
    if isinstance(value, list | tuple):
        return [fill(item, replacements) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, replacements) for key, item in value.items()}
    return value


def _field(location: tuple[int | str, ...]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part not in ("function-after", "function-before"):
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def parse_task(data: Mapping[str, Any], *, source: Path | None, default_name: str) -> Task:
    """Validate parsed TOML. :raises TaskFileError: naming the first wrong field."""
    where = str(source) if source is not None else "<task>"
    for internal in ("source", "harbor"):
        if internal in data:
            raise TaskFileError(f"{where}: {internal}: not a task file field")
    try:
        return Task.model_validate({"name": default_name, **data, "source": source})
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            message = str(error["msg"]).removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown field"
            elif error["type"] == "missing":
                message = "required field missing"
            problems.append(f"{_field(tuple(error['loc']))}: {message}")
        raise TaskFileError(f"{where}: {'; '.join(problems)}") from None


def load_task(name_or_path: str | Path) -> Task:
    """A task from a path (``*.toml``) or a shipped task's name (``editor-save``).

    :raises TaskFileError: not found (naming the shipped tasks), unreadable, not TOML, or a
        field is wrong (naming it).
    """
    text = str(name_or_path)
    path = Path(name_or_path)
    if not text.endswith(".toml") and "/" not in text:
        path = TASKS_DIR / f"{text}.toml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in TASKS_DIR.glob("*.toml")))
            raise TaskFileError(f"no task named {text!r}; shipped tasks: {known}")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TaskFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TaskFileError(f"{path}: not valid TOML ({exc})") from None
    return parse_task(data, source=path.resolve(), default_name=path.stem)


def shipped_tasks() -> list[Task]:
    """Every task under :data:`TASKS_DIR`, by name."""
    return [load_task(path) for path in sorted(TASKS_DIR.glob("*.toml"))]
