"""A task file's Harbor copy (:mod:`cubicle.orchestrator.harbor`): ``scripts/harbor-export``
writes one per shipped task into ``examples/harbor/`` (tests/eval/test_harbor_files.py checks
that each is up to date).

The copy has the task's prompt as ``instruction.md``, its ``[setup]`` and ``[limits]`` in
``environment/cubicle-desktop.toml``, its checks as ``tests/test.sh`` (a Python program run by
bash in the guest, reward 1 when every check holds, else 0) and ``solution/solve.sh``, an oracle
that makes the end state the checks expect directly — files written, the form posted to the
form server — not through the desktop's apps (the task file's ``[scripted]`` script is the oracle
that drives the desktop). A task cannot be copied (:class:`NotExpressible`, saying why) when it
needs a person — ``[signin]`` (credentials through the person's callback) or function tools a
person answers (``scripted.tools``) — or has a check with no guest-side equivalent (a
``verifier`` not in :data:`GUEST_VERIFIERS`, a ``{TOOL_OUTPUT}`` text). A setup file copied
from the host (``source``) is copied into the copy's ``environment/files/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from cubicle.orchestrator.harbor import DESKTOP_MARKER, HarborTaskError
from cubicle.orchestrator.tasks import Task

__all__ = ["GUEST_VERIFIERS", "NotExpressible", "export_harbor", "harbor_files", "readme"]

FORM_DATA: Final = "~/.cubicle-task/form-data.json"
"""Where the form server stores what was posted, under the guest user's home
(``cubicle.orchestrator.modelrun.guest_steps.HELPER_FOLDER``)."""
_VERIFIERS: Final = "cubicle.orchestrator.modelrun.verifiers"
GUEST_VERIFIERS: Final[dict[str, dict[str, str]]] = {
    f"{_VERIFIERS}:count_matches_words": {"kind": "count_q_lines"},
    # the file manager's tasks: the file was moved or renamed, not copied
    f"{_VERIFIERS}:report_moved_away": {"kind": "gone", "path": "~/task/report.txt"},
    f"{_VERIFIERS}:notes_draft_renamed_away": {"kind": "gone", "path": "~/task/notes-draft.txt"},
}
"""Python verifiers (run on the host) with a guest-side equivalent in the copy's test.sh (and
solve.sh): its kind and arguments."""


class NotExpressible(HarborTaskError):
    """The task has no Harbor copy (the message says why)."""


_PRELUDE = r"""import json, os, pathlib, posixpath, sys, urllib.request
HOME = str(pathlib.Path.home())
WORKDIR = os.path.expanduser(SETUP["workdir"]).rstrip("/") or "/"
PORT = str(SETUP.get("port"))


def path(text):
    text = text.replace("{WORKDIR}", WORKDIR).replace("{HOME}", HOME).replace("{PORT}", PORT)
    text = os.path.expanduser(text)
    return posixpath.normpath(text if text.startswith("/") else posixpath.join(WORKDIR, text))


def read(name):
    try:
        return pathlib.Path(path(name)).read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
"""

_TEST = r"""

def count_q(words):
    return str(sum(1 for line in words.splitlines() if "q" in line))


results = []
for check in CHECKS:
    kind, name = check["kind"], check["name"]
    if kind == "equals":
        got = read(check["path"])
        ok = got == check["text"]
    elif kind == "contains":
        got = read(check["path"])
        ok = got is not None and check["text"] in got
    elif kind == "form":
        raw = read(FORM_DATA)
        try:
            got = json.loads(raw) if raw is not None else None
        except ValueError:
            got = raw
        ok = got == check["fields"]
    elif kind == "count_q_lines":
        words, got = read("words.txt"), read("count.txt")
        ok = words is not None and got is not None and got.strip() == count_q(words)
    elif kind == "gone":
        got = os.path.lexists(path(check["path"]))
        ok = not got
    else:
        ok, got = False, "unknown check kind " + kind
    results.append(ok)
    print(("ok      " if ok else "FAILED  ") + name + ("" if ok else ": got " + repr(got)[:300]))
os.makedirs("/logs/verifier", exist_ok=True)
pathlib.Path("/logs/verifier/reward.txt").write_text("1\n" if all(results) else "0\n")
"""

_SOLVE = r"""

for check in CHECKS:
    kind = check["kind"]
    if kind in ("equals", "contains"):
        target = pathlib.Path(path(check["path"]))
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(target.stat().st_mode | 0o200)
        target.write_text(check["text"], encoding="utf-8")
    elif kind == "form":
        request = urllib.request.Request(
            "http://127.0.0.1:" + PORT + "/submit",
            data=json.dumps(check["fields"]).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            reply.read()
    elif kind == "count_q_lines":
        words = read("words.txt")
        count = sum(1 for line in words.splitlines() if "q" in line)
        pathlib.Path(path("count.txt")).write_text(str(count) + "\n", encoding="utf-8")
    elif kind == "gone":
        if os.path.lexists(path(check["path"])):
            os.remove(path(check["path"]))
    else:
        sys.exit("unknown check kind " + kind)
    print("done    " + check["name"])
"""


def _refuse(task: Task) -> None:
    where = task.source or task.name
    if task.signin is not None:
        raise NotExpressible(
            f"{where}: needs a person to sign in ([signin]: the test credentials go through the "
            "person's callback; a Harbor task has no person)"
        )
    if task.scripted is not None and task.scripted.tools:
        raise NotExpressible(
            f"{where}: needs a person to answer {', '.join(task.scripted.tools)} (function "
            "tools; a Harbor task has no person)"
        )
    if task.harbor is not None:
        raise NotExpressible(f"{where}: already a Harbor task")
    if not task.checks:
        raise NotExpressible(f"{where}: has no checks, so no tests/test.sh")


def _check(task: Task, index: int) -> dict[str, Any]:
    check = task.checks[index]
    name = check.label
    if check.verifier is not None:
        equivalent = GUEST_VERIFIERS.get(check.verifier)
        if equivalent is None:
            raise NotExpressible(
                f"{task.source or task.name}: checks[{index}]: verifier {check.verifier} runs on "
                "the host and has no guest-side equivalent (GUEST_VERIFIERS)"
            )
        return {**equivalent, "name": name}
    if check.form is not None:
        return {"kind": "form", "name": name, "fields": dict(check.form)}
    if check.file is None:
        raise NotExpressible(
            f"{task.source or task.name}: checks[{index}] is of a kind with no guest-side "
            "equivalent in the Harbor export"
        )
    text = check.equals if check.equals is not None else check.contains
    assert text is not None
    if "{TOOL_OUTPUT}" in text:
        raise NotExpressible(f"{task.source or task.name}: checks[{index}] needs a tool's output")
    kind = "equals" if check.equals is not None else "contains"
    return {"kind": kind, "name": name, "path": check.file, "text": text}


def _program(task: Task, body: str, what: str) -> bytes:
    checks = [_check(task, index) for index in range(len(task.checks))]
    setup = {"workdir": task.setup.workdir, "port": task.port}
    data = (
        f"SETUP = json.loads({json.dumps(json.dumps(setup))})\n"
        f"CHECKS = json.loads({json.dumps(json.dumps(checks))})\n"
        f"FORM_DATA = {json.dumps(FORM_DATA)}\n"
    )
    script = (
        "#!/bin/bash\n"
        f"# {what} of the cubicle task {task.name}, written by scripts/harbor-export from its\n"
        "# task file (do not edit: run scripts/harbor-export again).\n"
        "set -euo pipefail\n"
        "exec python3 - <<'PYTHON'\n"
        "import json\n"
        f"{data}{_PRELUDE}{body}"
        "PYTHON\n"
    )
    return script.encode("utf-8")


def _toml_value(value: Any) -> str:
    """A TOML value (strings, numbers, booleans, lists and inline tables of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _sources(task: Task) -> dict[str, tuple[bytes, int]]:
    """The host files ``setup.files`` copies in (``source``), as the copy's
    ``environment/files/N/NAME`` (a folder's files under it, their modes kept)."""
    files: dict[str, tuple[bytes, int]] = {}
    for number, item in enumerate(task.setup.files):
        if item.source is None:
            continue
        path = task.source_path(item)
        base = f"environment/files/{number}/{path.name}"
        found = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in found:
            if file.is_dir() and not file.is_symlink():
                continue
            if file.is_symlink() or not file.is_file():
                raise NotExpressible(f"{path}: {file} is not a regular file; not exported")
            relative = base if file == path else f"{base}/{file.relative_to(path).as_posix()}"
            files[relative] = (file.read_bytes(), file.stat().st_mode & 0o7777)
    return files


def _desktop(task: Task) -> bytes:
    setup = task.setup.model_dump(exclude_defaults=False, exclude={"files"})
    lines = [
        "# This task runs on cubicle's desktop (cubicle/orchestrator/harbor.py): the task file's",
        "# [setup] and [limits].",
    ]
    for key, value in setup.items():
        if value is not None:
            lines.append(f"{key} = {_toml_value(value)}")
    for number, item in enumerate(task.setup.files):
        lines += ["", "[[files]]", f"path = {_toml_value(item.path)}"]
        if item.source is not None:
            name = task.source_path(item).name
            lines.append(f'source = "environment/files/{number}/{name}"')
            continue
        lines.append(f"content = {_toml_value(item.content)}")
        if item.mode is not None:
            lines.append(f'mode = "{item.mode:04o}"')
    lines += ["", "[limits]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in task.limits.model_dump().items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _task_toml(task: Task) -> bytes:
    source = f"tasks/{task.source.name}" if task.source is not None else task.name
    lines = [
        'version = "1.0"',
        "",
        "[task]",
        f"name = {_toml_value(task.name)}",
        f"description = {_toml_value(task.description)}",
        "",
        "[metadata]",
        f"source = {_toml_value(source)}",
        'category = "desktop"',
        "",
        "[verifier]",
        "timeout_sec = 120.0",
        "",
        "[agent]",
        "timeout_sec = 600.0",
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def harbor_files(task: Task) -> dict[str, tuple[bytes, int]]:
    """The Harbor copy of ``task``: relative path → (bytes, mode).

    :raises NotExpressible: the task has no Harbor copy (module docstring; the message says
        why)."""
    _refuse(task)
    return {
        "task.toml": (_task_toml(task), 0o644),
        "instruction.md": ((task.prompt.strip() + "\n").encode("utf-8"), 0o644),
        f"environment/{DESKTOP_MARKER}": (_desktop(task), 0o644),
        "tests/test.sh": (_program(task, _TEST, "tests/test.sh"), 0o755),
        "solution/solve.sh": (_program(task, _SOLVE, "solution/solve.sh"), 0o755),
        **_sources(task),
    }


def export_harbor(task: Task, parent: Path) -> Path:
    """Write the Harbor copy of ``task`` as ``parent/NAME/`` (files replaced); its folder.

    :raises NotExpressible: see :func:`harbor_files` (nothing written)."""
    files = harbor_files(task)
    folder = parent / task.name
    for relative, (data, mode) in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    return folder


def readme(tasks: list[Task]) -> tuple[str, list[Task]]:
    """``examples/harbor/README.md`` for ``tasks`` and the tasks that have a copy (the others
    are listed in it with the reason)."""
    copied: list[Task] = []
    missing: list[str] = []
    for task in tasks:
        try:
            harbor_files(task)
        except NotExpressible as exc:
            missing.append(f"- `{task.name}`: {str(exc).split(': ', 1)[-1]}")
        else:
            copied.append(task)
    lines = [
        "# Harbor copies of the shipped tasks",
        "",
        "Written by `scripts/harbor-export` from `tasks/*.toml` (do not edit; run it again after",
        "changing a task). Run them with `cubicle eval examples/harbor --oracle`; the format is",
        "in [docs/eval.md](../../docs/eval.md#harbor-task-folders).",
        "",
        *(f"- [`{task.name}`]({task.name}/): {task.description}" for task in copied),
        "",
        "Tasks with no Harbor copy:",
        "",
        *missing,
    ]
    return "\n".join(lines) + "\n", copied
