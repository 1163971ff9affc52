"""The ``environment`` of a session request, mapped onto a cubicle sandbox.

====================================  =========================================================
request field                         cubicle
====================================  =========================================================
``type: "openai_hosted"``             a sandbox on the server's backend (``--backend``)
``desktop: {enabled: true}``          the desktop (always there; ``false`` is refused: 400)
``network.access: "disabled"``        network policy ``none`` (the default when omitted)
``network.access: "enabled"``         ``open``; with ``--ask-origins`` ``ask:`` (every origin
                                      needs a person's approval)
``network.access: "restricted"``      ``allowed_domains``: ``allow:`` (a NAME admits it and its
                                      subdomains on 80/443, HOST:PORT exactly that);
                                      ``blocked_domains``: ``block:`` (all but these and
                                      their subdomains); both: 400. With ``--ask-origins``:
                                      ``ask:`` + ``allowed_domains`` (may be empty), origins
                                      outside it are held and asked; ``blocked_domains``: 400
``files: [{type: "inline"}]``         written to ``/home/cubicle/workspace/<path below
                                      /workspace>`` before the agent starts
``env``                               exported to the setup commands and to the desktop user's
                                      shells (``~/.bashrc``)
``setup_commands``                    ``sh -c COMMAND`` as the desktop user, in order, ``cwd``
                                      mapped like files (default the workspace); a non-zero
                                      exit fails the environment
``container_size``                    ``small``/``medium``/``large``: 1/1/2 CPUs, 2/2/4 GiB
====================================  =========================================================

Anything else cubicle cannot honour (``type: "none"`` or ``"self_hosted"``, ``environment_id``,
``environment_template_id``, ``file_id`` files, ``packages``, ``plugins``, ``skills``,
``capability_directories``, unknown keys) is a 400 naming the field — never silently ignored.
Empty lists and ``null`` are accepted where the API defaults them to empty (``packages``: each
of its lists).

The shape is :class:`EnvironmentBody` and the models below it, in the style of
:mod:`cubicle.orchestrator.serve.requests` (strict types, unknown fields refused, fields as the
installed ``openai`` package's ``EnvironmentParamOpenAIHosted`` declares them): a 400's
``param`` is the field's dotted path (``environment.files[2].path``) and its message starts with
it. The network checks that need the server's ask mode or compare two fields come after the
shape, in :func:`parse_environment`, naming their field the same way.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
import secrets
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import DEFAULT_ASK_TIMEOUT_S, NetworkPolicy
from cubicle.orchestrator.serve.errors import bad_request
from cubicle.orchestrator.serve.requests import validate
from cubicle_guest.protocol import MAX_FILE_BYTES

__all__ = [
    "WORKSPACE",
    "EnvironmentBody",
    "EnvironmentPlan",
    "FileToWrite",
    "SetupCommand",
    "parse_environment",
]

WORKSPACE = "/home/cubicle/workspace"
"""Where the API's ``/workspace`` lives in a cubicle guest (the desktop user's home)."""
API_WORKSPACE = "/workspace"
SIZES: Final[dict[str, tuple[float, int]]] = {
    "small": (1.0, 2048),
    "medium": (1.0, 2048),
    "large": (2.0, 4096),
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class FileToWrite:
    guest_path: str
    data: bytes


@dataclass(frozen=True)
class SetupCommand:
    command: str
    cwd: str


@dataclass
class EnvironmentPlan:
    """What to create and prepare for one session (the result of :func:`parse_environment`)."""

    network: NetworkPolicy
    access: str
    allowed_domains: list[str] = field(default_factory=list)
    files: list[FileToWrite] = field(default_factory=list)
    file_records: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    setup_commands: list[SetupCommand] = field(default_factory=list)
    container_size: str | None = None
    id: str = field(default_factory=lambda: "env_" + secrets.token_hex(12))

    @property
    def cpus(self) -> float | None:
        return SIZES[self.container_size][0] if self.container_size else None

    @property
    def memory_mb(self) -> int:
        return SIZES[self.container_size][1] if self.container_size else 2048

    def resource(self) -> dict[str, Any]:
        """The session's ``environment`` as the API returns it (command bodies never)."""
        return {
            "id": self.id,
            "type": "openai_hosted",
            "capability_directories": [],
            "files": self.file_records,
            "network": {"access": self.access, "allowed_domains": list(self.allowed_domains)},
            "packages": {"npm": [], "python": [], "system": []},
            "plugins": [],
            "skills": [],
            "container_size": self.container_size,
            "desktop": {"enabled": True},
        }


# -- the request's shape ---------------------------------------------------------------------------


class _Body(BaseModel):
    """Strict (no coercion) and refusing unknown fields, as the bodies of ``serve.requests``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _refused(reason: str) -> AfterValidator:
    """A field cubicle cannot honour: accepted when empty (null, ``[]``, ``{}``), else a 400
    saying ``reason``."""

    def check(value: Any) -> Any:
        if value not in (None, [], {}):
            raise ValueError(reason)
        return value

    return AfterValidator(check)


def _expecting(what: str) -> WrapValidator:
    """Any error in the value (its type, an element's type) is one ``must be WHAT`` at the field;
    for values whose elements' positions say nothing useful (a list of strings, a text)."""

    def wrap(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("expected", "must be {what}", {"what": what}) from None

    return WrapValidator(wrap)


def _hosted(value: str) -> str:
    if value != "openai_hosted":
        raise ValueError(
            f"is {value!r}, which cubicle serve does not support; use 'openai_hosted' "
            "(a cubicle desktop sandbox)"
        )
    return value


def _desktop_on(value: bool) -> bool:
    if not value:
        raise ValueError("cubicle sessions always run on a desktop; disabling it is not supported")
    return value


class DesktopBody(_Body):
    """``environment.desktop``: only ``{enabled: true}``."""

    enabled: Annotated[bool, AfterValidator(_desktop_on)]


Strings = Annotated[list[str], _expecting("a list of strings")]


class NetworkBody(_Body):
    """``environment.network``; which lists go with which ``access`` is checked by the mapping."""

    access: Literal["enabled", "disabled", "restricted"]
    allowed_domains: Strings | None = None
    blocked_domains: Strings | None = None


class PackagesBody(_Body):
    """``environment.packages``: accepted when every list is empty."""

    npm: Strings | None = None
    python: Strings | None = None
    system: Strings | None = None


def _no_packages(value: PackagesBody | None) -> PackagesBody | None:
    if value is not None and (value.npm or value.python or value.system):
        raise ValueError(
            "cubicle guests have no package installation (containers cannot reach PyPI/npm);"
            " install in setup_commands from Debian's mirror with network enabled"
        )
    return value


def _in_workspace(value: str) -> str:
    """An absolute path at or below ``/workspace``, without ``..`` or NUL."""
    if not value.startswith("/"):
        raise ValueError("must be an absolute path inside /workspace")
    normal = posixpath.normpath(value)
    if "\x00" in value or not (normal == API_WORKSPACE or normal.startswith(API_WORKSPACE + "/")):
        raise ValueError(f"{value!r} is not inside /workspace")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} must not contain '..'")
    return value


def _a_file(value: str) -> str:
    if posixpath.normpath(value) == API_WORKSPACE:
        raise ValueError("is the workspace itself, not a file")
    return value


def guest_path(api_path: str) -> str:
    """``/workspace/a/b`` (checked by the models) → ``/home/cubicle/workspace/a/b``."""
    return WORKSPACE + posixpath.normpath(api_path)[len(API_WORKSPACE) :]


WorkspacePath = Annotated[str, AfterValidator(_in_workspace)]


def _inline(value: str) -> str:
    if value == "file_id":
        raise ValueError(
            "file_id files need the OpenAI Files API, which cubicle does not have; "
            "send the content inline (type 'inline', base64 data)"
        )
    if value != "inline":
        raise ValueError(f"must be 'inline', got {value!r}")
    return value


def _base64(value: str) -> str:
    try:
        size = len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        raise ValueError("is not valid standard base64") from None
    if size > MAX_FILE_BYTES:
        raise ValueError(f"is {size} bytes, over cubicle's {MAX_FILE_BYTES} byte limit")
    return value


class InlineFileBody(_Body):
    """One of ``environment.files``: ``{type: "inline", path, data}`` (``file_id``: 400)."""

    type: Annotated[str, AfterValidator(_inline)]
    path: Annotated[WorkspacePath, AfterValidator(_a_file)]
    data: Annotated[str, _expecting("base64 text"), AfterValidator(_base64)]


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError("is not a valid variable name (letters, digits, _; no leading digit)")
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL")
    return value


Env = dict[Annotated[str, AfterValidator(_env_name)], Annotated[str, AfterValidator(_no_nul)]]


def _a_command(value: str) -> str:
    if not value.strip() or "\x00" in value:
        raise ValueError("must be a non-empty command without NUL")
    return value


class SetupCommandBody(_Body):
    """One of ``environment.setup_commands``."""

    command: Annotated[str, AfterValidator(_a_command)]
    cwd: WorkspacePath | None = None


class EnvironmentBody(_Body):
    """A session request's ``environment``: the fields of ``EnvironmentParamOpenAIHosted``."""

    type: Annotated[str, AfterValidator(_hosted)]
    environment_id: Annotated[
        Any, _refused("prewarmed environments are not available in cubicle")
    ] = None
    environment_template_id: Annotated[
        Any, _refused("environment templates are not available in cubicle")
    ] = None
    packages: Annotated[PackagesBody | None, AfterValidator(_no_packages)] = None
    plugins: Annotated[Any, _refused("plugins are not supported by cubicle")] = None
    skills: Annotated[Any, _refused("skills are not supported by cubicle")] = None
    capability_directories: Annotated[
        Any, _refused("capability directories are not supported by cubicle")
    ] = None
    desktop: DesktopBody | None = None
    network: NetworkBody | None = None
    container_size: Literal["small", "medium", "large"] | None = None
    files: list[InlineFileBody] | None = None
    env: Env | None = None
    setup_commands: list[SetupCommandBody] | None = None


class _Request(_Body):
    """Puts ``environment`` in front of every error's path."""

    environment: EnvironmentBody


# -- the mapping -----------------------------------------------------------------------------------


def parse_environment(value: object, *, ask_timeout: float | None = None) -> EnvironmentPlan:
    """Check a request's ``environment`` and map it (see the module doc).

    :param ask_timeout: the server's ask mode (``cubicle serve --ask-origins``): ``restricted``
        and ``enabled`` sessions ask about origins outside ``allowed_domains``, a question
        unanswered after this many seconds is a denial; ``None``: no asking.

    :raises ApiError: 400 naming the first field cubicle cannot honour or that is malformed.
    """
    body = validate(_Request, {"environment": value}).environment
    plan = _network(body.network, ask_timeout)
    plan.container_size = body.container_size
    for file in body.files or []:
        data = base64.b64decode(file.data, validate=True)
        plan.files.append(FileToWrite(guest_path(file.path), data))
        plan.file_records.append(
            {
                "id": "file_" + secrets.token_hex(8),
                "type": "inline",
                "path": file.path,
                "size_bytes": len(data),
            }
        )
    plan.env = dict(body.env or {})
    for command in body.setup_commands or []:
        cwd = WORKSPACE if command.cwd is None else guest_path(command.cwd)
        plan.setup_commands.append(SetupCommand(command.command, cwd))
    return plan


def _network(network: NetworkBody | None, ask_timeout: float | None) -> EnvironmentPlan:
    """The policy of ``environment.network`` (``None``: disabled); what one field cannot say."""
    p = "environment.network"
    if network is None:
        return EnvironmentPlan(NetworkPolicy.none(), "disabled")
    access = network.access
    allowed = list(network.allowed_domains or [])
    blocked = list(network.blocked_domains or [])
    ask = ask_timeout is not None
    if access != "restricted":
        for key, entries in (("allowed_domains", allowed), ("blocked_domains", blocked)):
            if entries:
                raise bad_request(
                    f"environment.network.{key} needs access 'restricted' (got {access!r})",
                    f"{p}.{key}",
                )
        if access == "disabled":
            return EnvironmentPlan(NetworkPolicy.none(), access)
        if ask_timeout is None:
            return EnvironmentPlan(NetworkPolicy.parse("open"), access)
        # --ask-origins: every new origin needs a person's approval, "enabled" included
        return EnvironmentPlan(NetworkPolicy.restricted(ask=True, ask_timeout=ask_timeout), access)
    if allowed and blocked:
        raise bad_request(
            "environment.network.blocked_domains cannot be combined with allowed_domains; "
            "give one of them",
            f"{p}.blocked_domains",
        )
    if blocked and ask:
        raise bad_request(
            "environment.network.blocked_domains: this server asks a person about every origin "
            "outside allowed_domains (cubicle serve --ask-origins), which a block list cannot "
            "express; list the domains to admit without asking in allowed_domains",
            f"{p}.blocked_domains",
        )
    if not (allowed or blocked or ask):
        raise bad_request(
            "environment.network.allowed_domains or blocked_domains must name at least one "
            "domain when access is 'restricted'",
            f"{p}.allowed_domains",
        )
    key = "blocked_domains" if blocked else "allowed_domains"
    try:
        policy = NetworkPolicy.restricted(
            allowed_domains=allowed,
            blocked_domains=blocked,
            ask=ask,
            ask_timeout=DEFAULT_ASK_TIMEOUT_S if ask_timeout is None else ask_timeout,
        )
    except ConfigError as exc:
        raise bad_request(f"environment.network.{key}: {exc}", f"{p}.{key}") from None
    return EnvironmentPlan(policy, access, allowed)
