"""Harbor-shaped task folders (Harbor's task format, as ``cubicle eval`` reads it).

A Harbor task is a folder::

    editor-save/
    ├── task.toml             # [task] name/description (or [metadata]), [verifier] timeout_sec,
    │                         # [agent] timeout_sec; other tables are Harbor's and not read
    ├── instruction.md        # the model's task (cubicle fills {WORKDIR}, {HOME}, {PORT})
    ├── environment/
    │   └── cubicle-desktop.toml   # the marker: this task runs on cubicle's desktop
    ├── tests/
    │   └── test.sh           # the check: run in the guest, writes /logs/verifier/reward.txt
    │                         # (a number) or /logs/verifier/reward.json ({"reward": number})
    └── solution/
        └── solve.sh          # the oracle (--oracle): run in the guest instead of a model

**Which environment.** Harbor builds ``environment/Dockerfile`` (or a ``docker-compose.yaml``,
or ``[environment] docker_image``) for the agent; cubicle runs its own desktop instead. A folder
says "cubicle's desktop" with ``environment/cubicle-desktop.toml``, which holds what a task file's
``[setup]`` holds (``screen``, ``network``, ``workdir``, ``open``, ``url``, ``form_server``,
``[[files]]``, a ``source`` relative to the task folder) plus optional ``[limits]``. A folder
with a Dockerfile, Containerfile or compose file in ``environment/``, a ``docker_image``, or no
marker is refused, naming what it has: cubicle cannot run another environment.

**The guest.** After the run, ``tests/`` is uploaded to ``/tests`` (``Sandbox.upload``'s path,
never a mounted host folder), ``/logs/verifier`` is emptied, and ``bash /tests/test.sh`` runs as
the desktop user in the task's work folder; ``solution/`` goes to ``/solution`` for the oracle.
The guest images give the desktop user ``/tests``, ``/solution`` and ``/logs`` as small tmpfs
mounts (Docker: the container's tmpfs; VM: mounted at boot). Reward 1 passes; 0 (or anything in
between) fails; no reward file, or one that is not a number in [0, 1], is a failed check naming
the file (:mod:`cubicle.orchestrator.modelrun.harbor_guest`).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Final

from cubicle.orchestrator.tasks import HarborParts, Setup, Task, TaskFileError, parse_task

__all__ = [
    "DESKTOP_MARKER",
    "FOREIGN_ENVIRONMENTS",
    "GUEST_LOGS",
    "GUEST_SOLUTION",
    "GUEST_TESTS",
    "HarborTaskError",
    "is_harbor_folder",
    "load_harbor",
]

DESKTOP_MARKER: Final = "cubicle-desktop.toml"
"""``environment/`` holds this file: the task runs on cubicle's desktop (module docstring)."""
FOREIGN_ENVIRONMENTS: Final = (
    "Dockerfile",
    "Containerfile",
    "docker-compose.yaml",
    "docker-compose.yml",
    "compose.yaml",
    "compose.yml",
)
"""Files in ``environment/`` that describe an environment other than cubicle's desktop."""
GUEST_TESTS: Final = "/tests"
GUEST_SOLUTION: Final = "/solution"
GUEST_LOGS: Final = "/logs"
_MARKER_FIELDS: Final = frozenset({*Setup.model_fields, "limits"})
"""What the marker may hold: a task file's ``[setup]`` fields and ``[limits]``."""


class HarborTaskError(TaskFileError):
    """A Harbor task folder cannot be run: a part missing or wrong, or a foreign environment."""


def is_harbor_folder(path: Path) -> bool:
    """``path`` is a folder holding a ``task.toml``."""
    return path.is_dir() and (path / "task.toml").is_file()


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise HarborTaskError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise HarborTaskError(f"{path}: not valid TOML ({exc})") from None


def _table(data: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise HarborTaskError(f"{where}: [{key}] must be a table")
    return value


def _timeout(table: dict[str, Any], name: str, where: Path, default: float) -> float:
    value = table.get("timeout_sec", default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise HarborTaskError(f"{where}: {name}.timeout_sec must be a positive number of seconds")
    return float(value)


def _environment(folder: Path, config: dict[str, Any], where: Path) -> dict[str, Any]:
    """The marker's content, after refusing any other environment by name."""
    environment = _table(config, "environment", where)
    for key in ("docker_image", "dockerfile"):
        if key in environment:
            raise HarborTaskError(
                f"{where}: environment.{key} = {environment[key]!r}: cubicle runs Harbor tasks "
                f"on its own desktop only, not another image",
                hint=f"describe the desktop in environment/{DESKTOP_MARKER} instead",
            )
    env_dir = folder / "environment"
    if not env_dir.is_dir():
        raise HarborTaskError(
            f"{folder}: no environment/ folder",
            hint=f"a cubicle desktop task has environment/{DESKTOP_MARKER}",
        )
    foreign = sorted(p.name for p in env_dir.iterdir() if p.name in FOREIGN_ENVIRONMENTS)
    if foreign:
        raise HarborTaskError(
            f"{env_dir}: holds {', '.join(foreign)}: an environment other than cubicle's "
            "desktop, which cubicle cannot run",
            hint=f"a cubicle desktop task has environment/{DESKTOP_MARKER} and no image",
        )
    marker = env_dir / DESKTOP_MARKER
    if not marker.is_file():
        raise HarborTaskError(
            f"{env_dir}: no {DESKTOP_MARKER}, so it does not say it runs on cubicle's desktop",
            hint=f"add environment/{DESKTOP_MARKER} (its [setup]: screen, network, files, ...)",
        )
    desktop = _toml(marker)
    unknown = sorted(set(desktop) - _MARKER_FIELDS)
    if unknown:
        raise HarborTaskError(
            f"{marker}: unknown field(s) {', '.join(unknown)}; it holds "
            f"{', '.join(sorted(_MARKER_FIELDS))}"
        )
    return desktop


def _name(folder: Path, task: dict[str, Any], where: Path) -> str:
    name = task.get("name", folder.name)
    if not isinstance(name, str):
        raise HarborTaskError(f"{where}: task.name must be a string")
    name = name.rsplit("/", 1)[-1]  # Harbor's "org/name"
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", name):
        raise HarborTaskError(
            f"{where}: task name {name!r}: lower-case letters, digits, '.', '_' and '-' only"
        )
    return name


def load_harbor(folder: str | Path) -> Task:
    """The Harbor task in ``folder`` as a :class:`~cubicle.orchestrator.tasks.Task` (its
    ``harbor`` set, no ``checks``: ``tests/test.sh`` is the check).

    :raises HarborTaskError: a part missing or wrong, or a foreign environment (named).
    """
    folder = Path(folder).resolve()
    where = folder / "task.toml"
    if not where.is_file():
        raise HarborTaskError(f"{folder}: no task.toml, so not a Harbor task folder")
    config = _toml(where)
    task_table = _table(config, "task", where)
    metadata = _table(config, "metadata", where)
    desktop = _environment(folder, config, where)
    instruction = folder / "instruction.md"
    try:
        prompt = instruction.read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise HarborTaskError(f"{instruction}: cannot read it ({exc})") from None
    if not prompt:
        raise HarborTaskError(f"{instruction}: empty; it is the model's task")
    if not (folder / "tests" / "test.sh").is_file():
        raise HarborTaskError(f"{folder}: no tests/test.sh, the task's check")
    description = task_table.get("description", metadata.get("description", ""))
    if not isinstance(description, str):
        raise HarborTaskError(f"{where}: the description must be a string")
    limits = desktop.pop("limits", None)
    data: dict[str, Any] = {"description": description, "prompt": prompt, "setup": desktop}
    if limits is not None:
        data["limits"] = limits
    try:
        task = parse_task(data, source=where, default_name=_name(folder, task_table, where))
    except HarborTaskError:
        raise
    except TaskFileError as exc:
        raise HarborTaskError(
            f"{str(exc).replace(str(where), str(folder / 'environment' / DESKTOP_MARKER))}"
        ) from None
    parts = HarborParts(
        folder=folder,
        verifier_timeout_s=_timeout(_table(config, "verifier", where), "verifier", where, 120.0),
        agent_timeout_s=_timeout(_table(config, "agent", where), "agent", where, 600.0),
    )
    return task.model_copy(update={"harbor": parts})
