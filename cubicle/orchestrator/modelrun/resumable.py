"""What ``cubicle run`` and ``cubicle drill`` share to make a run resumable and to resume it
(issue 45; the ledger itself: :mod:`cubicle.orchestrator.modelrun.ledger`; the sandbox's mark
that ``gc`` reads: :mod:`cubicle.orchestrator.resume_marks`).

- ``resume.json`` in the run folder (0600): the command, the sandbox id and backend, and the
  settings the resumed run needs again (task, loop, view …), written when the run starts;
- :func:`turn_completed_hook`: after each completed turn, the sandbox's resume mark (deadline
  = now + the window);
- :func:`reattach`: for ``--resume DIR``, every refusal named — not a run folder, a toolset run,
  a run that never completed a turn, a sandbox gone or whose window passed, a run another live
  process is resuming — then the sandbox, held by this process, and the saved ledger.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cubicle.orchestrator.errors import ConfigError, SandboxNotFound
from cubicle.orchestrator.modelrun.ledger import SavedLedger, load_ledger
from cubicle.orchestrator.resume_marks import (
    DEFAULT_RESUME_WINDOW_S,
    read_mark,
    write_mark,
)
from cubicle.orchestrator.sandbox import Sandbox

__all__ = [
    "RESUME_FILE",
    "Resumed",
    "add_resume_arguments",
    "namespace_settings",
    "parse_window",
    "read_resume_file",
    "reattach",
    "turn_completed_hook",
    "write_resume_file",
]

RESUME_FILE: Final = "resume.json"
_WINDOW = re.compile(r"(\d+(?:\.\d+)?)([smh]?)\Z")


def parse_window(text: str) -> float:
    """``--resume-window``: ``N`` minutes, or ``Ns`` / ``Nm`` / ``Nh``; seconds, positive.

    :raises ConfigError: naming the value.
    """
    match = _WINDOW.fullmatch(text.strip())
    seconds = 0.0
    if match:
        seconds = float(match[1]) * {"s": 1, "m": 60, "h": 3600, "": 60}[match[2]]
    if seconds <= 0:
        raise ConfigError(
            f"--resume-window: {text!r} is not a positive duration (N minutes, or Ns, Nm, Nh)"
        )
    return seconds


def add_resume_arguments(parser: Any, *, command: str) -> None:
    """``--resume DIR``, ``--resume-window``, ``--keep-for-resume`` on ``parser``."""
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"continue the interrupted {command} whose --out was DIR on the same sandbox, "
        "from its last completed turn with the remaining step budget (--loop runner only)",
    )
    parser.add_argument(
        "--resume-window",
        default=f"{DEFAULT_RESUME_WINDOW_S / 60:.0f}m",
        metavar="DURATION",
        help="after its first completed turn the sandbox stays resumable this long after the "
        "last completed turn when the run dies (gc spares it until then); N minutes or "
        "Ns/Nm/Nh (default 30m)",
    )
    parser.add_argument(
        "--keep-for-resume",
        action="store_true",
        help="Ctrl-C/SIGTERM keeps the sandbox resumable instead of removing it",
    )


def write_resume_file(
    out: Path, *, command: str, sandbox: Sandbox, settings: dict[str, Any]
) -> None:
    """Write ``out/resume.json`` (0600): what ``--resume`` needs to continue this run."""
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "command": command,
        "sandbox": sandbox.id,
        "backend": sandbox.provider.name,
        "settings": settings,
    }
    path = out / RESUME_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, default=str)


def turn_completed_hook(sandbox: Sandbox, out: Path, window_s: float) -> Callable[[], None]:
    """The run's ``on_turn_completed``: mark ``sandbox`` resumable for ``window_s`` more."""

    def completed() -> None:
        write_mark(sandbox.id, window_s=window_s, out=out)

    return completed


@dataclass
class Resumed:
    """A run folder being resumed: its sandbox (held by this process), ledger and settings."""

    out: Path
    sandbox: Sandbox
    ledger: SavedLedger
    settings: dict[str, Any]


def read_resume_file(out: Path, command: str) -> dict[str, Any]:
    """``out/resume.json``, checked to be of ``command``.

    :raises ConfigError: naming what is wrong.
    """
    path = out / RESUME_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"--resume {out}: no {RESUME_FILE} there; give the folder that was the --out of "
            f"an interrupted cubicle {command}"
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume {out}: {path} cannot be read: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
        raise ConfigError(f"--resume {out}: {path} is not a cubicle resume file")
    if data.get("command") != command:
        raise ConfigError(
            f"--resume {out}: that folder is a cubicle {data.get('command')} run; resume it "
            f"with cubicle {data.get('command')} --resume"
        )
    return data


def reattach(out: Path, command: str, window_s: float) -> Resumed:
    """Check ``out`` can be resumed, attach to its sandbox and hold it (module docstring).

    :raises ConfigError: naming why it cannot be resumed and what is lost.
    """
    data = read_resume_file(out, command)
    settings: dict[str, Any] = data["settings"]
    if settings.get("loop") != "runner":
        raise ConfigError(
            f"--resume {out}: a --loop {settings.get('loop')} run cannot be resumed: only "
            "--loop runner keeps a ledger (ResponsesToolRunner's resume points)"
        )
    sandbox_id = str(data.get("sandbox"))
    ledger = load_ledger(out)
    if ledger.completed_turns == 0:
        raise ConfigError(
            f"--resume {out}: the run never completed a turn, so its sandbox {sandbox_id} was "
            "not kept; start the run again"
        )
    mark = read_mark(sandbox_id)
    lost = f"the desktop and the run's progress ({ledger.completed_turns} completed turns) are lost"
    try:
        sandbox = Sandbox.attach(sandbox_id, str(data.get("backend") or "") or None)
    except SandboxNotFound:
        raise ConfigError(
            f"--resume {out}: its sandbox {sandbox_id} is gone (removed once its resume window "
            f"passed, or torn down); {lost}"
        ) from None
    if mark is None:
        raise ConfigError(
            f"--resume {out}: its sandbox {sandbox_id} is not resumable (the run ended or was "
            f"cancelled and tore it down); {lost}"
        )
    if mark.holder_alive() and mark.holder.pid != os.getpid():
        raise ConfigError(
            f"--resume {out}: process {mark.holder.pid} is running this run on {sandbox_id} "
            "now; stop it first"
        )
    if mark.deadline < time.time():
        raise ConfigError(
            f"--resume {out}: the resume window of {sandbox_id} passed at "
            f"{time.strftime('%H:%M:%S', time.localtime(mark.deadline))}; {lost} "
            f"(remove the sandbox with: cubicle gc)"
        )
    write_mark(sandbox_id, window_s=window_s, out=out)
    return Resumed(out, sandbox, ledger, settings)


def namespace_settings(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The JSON-able values of ``names`` in ``args`` (paths as text)."""
    values: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name)
        values[name] = str(value) if isinstance(value, Path) else value
    return values
