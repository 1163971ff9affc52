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
Empty lists and ``null`` are accepted where the API defaults them to empty.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import DEFAULT_ASK_TIMEOUT_S, NetworkPolicy
from cubicle.orchestrator.serve.errors import bad_request
from cubicle_guest.protocol import MAX_FILE_BYTES

__all__ = ["WORKSPACE", "EnvironmentPlan", "FileToWrite", "SetupCommand", "parse_environment"]

WORKSPACE = "/home/cubicle/workspace"
"""Where the API's ``/workspace`` lives in a cubicle guest (the desktop user's home)."""
API_WORKSPACE = "/workspace"
SIZES: dict[str, tuple[float, int]] = {
    "small": (1.0, 2048),
    "medium": (1.0, 2048),
    "large": (2.0, 4096),
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_KNOWN = {
    "type",
    "desktop",
    "network",
    "files",
    "env",
    "setup_commands",
    "container_size",
}
_UNSUPPORTED = {
    "environment_id": "prewarmed environments are not available in cubicle",
    "environment_template_id": "environment templates are not available in cubicle",
    "packages": "cubicle guests have no package installation (containers cannot reach PyPI/npm);"
    " install in setup_commands from Debian's mirror with network enabled",
    "plugins": "plugins are not supported by cubicle",
    "skills": "skills are not supported by cubicle",
    "capability_directories": "capability directories are not supported by cubicle",
}


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


def _empty(value: object) -> bool:
    return value is None or value in ([], {})


def _map_path(raw: object, param: str) -> str:
    """``/workspace/a/b`` → ``/home/cubicle/workspace/a/b``; anything outside is a 400."""
    if not isinstance(raw, str) or not raw.startswith("/"):
        raise bad_request(f"{param} must be an absolute path inside /workspace", param)
    normal = posixpath.normpath(raw)
    if "\x00" in raw or not (normal == API_WORKSPACE or normal.startswith(API_WORKSPACE + "/")):
        raise bad_request(f"{param} {raw!r} is not inside /workspace", param)
    if ".." in raw.split("/"):
        raise bad_request(f"{param} {raw!r} must not contain '..'", param)
    return WORKSPACE + normal[len(API_WORKSPACE) :]


def parse_environment(value: object, *, ask_timeout: float | None = None) -> EnvironmentPlan:
    """Check a request's ``environment`` and map it (see the module doc).

    :param ask_timeout: the server's ask mode (``cubicle serve --ask-origins``): ``restricted``
        and ``enabled`` sessions ask about origins outside ``allowed_domains``, a question
        unanswered after this many seconds is a denial; ``None``: no asking.

    :raises ApiError: 400 naming the first field cubicle cannot honour or that is malformed.
    """
    p = "environment"
    if not isinstance(value, dict):
        raise bad_request("environment must be an object", p)
    kind = value.get("type")
    if kind != "openai_hosted":
        raise bad_request(
            f"environment.type {kind!r} is not supported by cubicle serve; use 'openai_hosted' "
            "(a cubicle desktop sandbox)",
            f"{p}.type",
        )
    for key in value:
        if key in _UNSUPPORTED and not _empty(value[key]):
            raise bad_request(f"environment.{key}: {_UNSUPPORTED[key]}", f"{p}.{key}")
        if key not in _KNOWN and key not in _UNSUPPORTED:
            raise bad_request(f"environment.{key} is not a known field", f"{p}.{key}")
    desktop = value.get("desktop")
    if desktop is not None:
        if not isinstance(desktop, dict) or set(desktop) - {"enabled"}:
            raise bad_request("environment.desktop must be {enabled: bool}", f"{p}.desktop")
        if desktop.get("enabled") is not True:
            raise bad_request(
                "environment.desktop.enabled: cubicle sessions always run on a desktop; "
                "disabling it is not supported",
                f"{p}.desktop.enabled",
            )
    plan = _network(value.get("network"), ask_timeout)
    size = value.get("container_size")
    if size is not None:
        if size not in SIZES:
            raise bad_request(
                f"environment.container_size {size!r} is not small, medium or large",
                f"{p}.container_size",
            )
        plan.container_size = size
    _files(value.get("files"), plan)
    _env(value.get("env"), plan)
    _setup(value.get("setup_commands"), plan)
    return plan


def _domains(network: dict[str, Any], key: str) -> list[str]:
    """``environment.network.<key>`` as a list of strings (``null``: empty)."""
    value = network.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise bad_request(
            f"environment.network.{key} must be a list of strings", f"environment.network.{key}"
        )
    return list(value)


def _network(network: object, ask_timeout: float | None) -> EnvironmentPlan:
    p = "environment.network"
    if network is None:
        return EnvironmentPlan(NetworkPolicy.none(), "disabled")
    if not isinstance(network, dict):
        raise bad_request("environment.network must be an object", p)
    for key in network:
        if key not in ("access", "allowed_domains", "blocked_domains"):
            raise bad_request(f"environment.network.{key} is not a known field", f"{p}.{key}")
    access = network.get("access")
    if access not in ("disabled", "enabled", "restricted"):
        raise bad_request(
            f"environment.network.access {access!r} is not enabled, disabled or restricted",
            f"{p}.access",
        )
    allowed = _domains(network, "allowed_domains")
    blocked = _domains(network, "blocked_domains")
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


def _entries(value: object, name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(param, entry)`` of each object in the list field ``environment.<name>`` (``None``:
    none). :raises ApiError: 400 when it is not a list of objects."""
    if value is None:
        return
    if not isinstance(value, list):
        raise bad_request(f"environment.{name} must be a list", f"environment.{name}")
    for index, entry in enumerate(value):
        p = f"environment.{name}[{index}]"
        if not isinstance(entry, dict):
            raise bad_request(f"{p} must be an object", p)
        yield p, entry


def _files(files: object, plan: EnvironmentPlan) -> None:
    for p, entry in _entries(files, "files"):
        if entry.get("type") == "file_id":
            raise bad_request(
                f"{p}: file_id files need the OpenAI Files API, which cubicle does not have; "
                "send the content inline (type 'inline', base64 data)",
                f"{p}.type",
            )
        if entry.get("type") != "inline":
            raise bad_request(f"{p}.type must be 'inline'", f"{p}.type")
        extra = set(entry) - {"type", "path", "data"}
        if extra:
            raise bad_request(f"{p}.{sorted(extra)[0]} is not a known field", p)
        guest_path = _map_path(entry.get("path"), f"{p}.path")
        if guest_path == WORKSPACE:
            raise bad_request(f"{p}.path names the workspace itself, not a file", f"{p}.path")
        raw = entry.get("data")
        if not isinstance(raw, str):
            raise bad_request(f"{p}.data must be base64 text", f"{p}.data")
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(f"{p}.data is not valid standard base64", f"{p}.data") from None
        if len(data) > MAX_FILE_BYTES:
            raise bad_request(
                f"{p}.data is {len(data)} bytes, over cubicle's {MAX_FILE_BYTES} byte limit",
                f"{p}.data",
            )
        plan.files.append(FileToWrite(guest_path, data))
        plan.file_records.append(
            {
                "id": "file_" + secrets.token_hex(8),
                "type": "inline",
                "path": entry["path"],
                "size_bytes": len(data),
            }
        )


def _env(env: object, plan: EnvironmentPlan) -> None:
    if env is None:
        return
    if not isinstance(env, dict):
        raise bad_request("environment.env must be an object of strings", "environment.env")
    for name, val in env.items():
        p = f"environment.env.{name}"
        if not _ENV_NAME.fullmatch(name):
            raise bad_request(f"environment.env name {name!r} is not a valid variable name", p)
        if not isinstance(val, str) or "\x00" in val:
            raise bad_request(f"{p} must be a string without NUL", p)
        plan.env[name] = val


def _setup(commands: object, plan: EnvironmentPlan) -> None:
    for p, entry in _entries(commands, "setup_commands"):
        if not isinstance(entry.get("command"), str):
            raise bad_request(f"{p} must be {{command: str, cwd?: str}}", p)
        extra = set(entry) - {"command", "cwd"}
        if extra:
            raise bad_request(f"{p}.{sorted(extra)[0]} is not a known field", p)
        if not entry["command"].strip() or "\x00" in entry["command"]:
            raise bad_request(f"{p}.command must be a non-empty command", f"{p}.command")
        cwd = entry.get("cwd")
        guest_cwd = WORKSPACE if cwd is None else _map_path(cwd, f"{p}.cwd")
        plan.setup_commands.append(SetupCommand(entry["command"], guest_cwd))
