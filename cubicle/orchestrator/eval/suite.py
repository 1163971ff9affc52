"""What ``cubicle eval SUITE`` runs: the tasks SUITE names.

SUITE is either

* a **folder**: every ``*.toml`` task file directly in it, by file name, then every subfolder
  that is a Harbor task folder (holds a ``task.toml``: :mod:`cubicle.orchestrator.harbor`), by
  name — no deeper, so ``cubicle eval tasks`` from the repository root runs every shipped task
  exactly once; a folder that is itself a Harbor task is a suite of that one task; or
* a **list file**: one task per line — a task file's path or a Harbor task folder (relative to
  the list file's folder, or absolute) or a shipped task's name; blank lines and ``#`` comments
  are skipped.

Every task is loaded and validated before anything starts (:func:`cubicle.orchestrator.tasks.
load_task`); two tasks with the same name, an empty suite, or a SUITE that is neither a folder nor
a readable file is a :class:`SuiteError` naming what was wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.harbor import is_harbor_folder, load_harbor
from cubicle.orchestrator.tasks import Task, TaskFileError, load_task

__all__ = ["Suite", "SuiteError", "load_suite"]


class SuiteError(ConfigError):
    """SUITE cannot be run: missing, empty, a line or task file wrong (named), a name twice."""


@dataclass(frozen=True)
class Suite:
    """The tasks of a suite, in run order, and where they came from (``source``: resolved)."""

    source: Path
    tasks: tuple[Task, ...]

    @property
    def names(self) -> list[str]:
        return [task.name for task in self.tasks]


def load_suite(suite: str | Path) -> Suite:
    """The suite at ``suite`` (module docstring).

    :raises SuiteError: naming the folder, file, line or task that is wrong.
    """
    path = Path(suite)
    if is_harbor_folder(path):
        tasks = [_load(path, where=str(path))]
    elif path.is_dir():
        entries = [
            *sorted(path.glob("*.toml")),
            *sorted(p for p in path.iterdir() if is_harbor_folder(p)),
        ]
        if not entries:
            raise SuiteError(
                f"suite {path}: the folder holds no task files (*.toml) and no Harbor task "
                "folders (a subfolder with task.toml)"
            )
        tasks = [_load(entry, where=str(path)) for entry in entries]
    elif path.is_file():
        tasks = _from_list(path)
    else:
        raise SuiteError(
            f"suite {path}: no such folder or list file",
            hint="give a folder of task files (cubicle eval tasks) or a file listing them",
        )
    seen: dict[str, Task] = {}
    for task in tasks:
        if task.name in seen:
            raise SuiteError(
                f"suite {path}: two tasks are named {task.name!r} "
                f"({seen[task.name].source} and {task.source}); task names must be unique"
            )
        seen[task.name] = task
    return Suite(path.resolve(), tuple(tasks))


def _from_list(path: Path) -> list[Task]:
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"suite {path}: cannot read the list file ({exc})") from None
    if path.suffix == ".toml":
        raise SuiteError(
            f"suite {path}: a task file, not a suite; give its folder or a list file naming it"
        )
    tasks: list[Task] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        entry: str | Path = line
        if line.endswith(".toml") or "/" in line:
            candidate = Path(line)
            entry = candidate if candidate.is_absolute() else path.parent / candidate
        tasks.append(_load(entry, where=f"{path}:{number}"))
    if not tasks:
        raise SuiteError(f"suite {path}: the list file names no task")
    return tasks


def _load(entry: str | Path, *, where: str) -> Task:
    try:
        if isinstance(entry, Path) and entry.is_dir():
            return load_harbor(entry)
        return load_task(entry)
    except TaskFileError as exc:
        raise SuiteError(f"suite {where}: {exc}") from None
