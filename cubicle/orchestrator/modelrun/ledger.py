"""The run's ledger: the SDK's resume points (``ResponsesToolLedger``) kept in the run folder.

The runner loop (``ResponsesToolRunner``) saves a checkpoint before every request and around
every tool call (``phase``: ``boundary`` between turns, ``pending`` while a turn's calls run,
``final`` once the run ended). :class:`RunLedger` is its ``save``:

- ``ledger.json``: the latest **boundary** checkpoint, complete (history with screenshots, the
  request count consumed, the call receipts) — the only kind the SDK resumes from;
- ``ledger-pending.json``: the latest later save, small (its phase, revision, the calls
  attempted and returned, the pending calls' actions): what was in flight when the run died.

Both are written atomically (a temporary file renamed over the old one, synced) with mode 0600:
the history holds every screenshot and the task, private to the run's owner.

:func:`load_ledger` reads them back for ``--resume``: the boundary to continue from, how many
turns it completed, and the **uncertain** calls (attempted after that boundary, without a
returned outcome: some of their actions may have happened). Those are never sent again — the
resumed run settles them with a fresh screenshot (:mod:`cubicle.orchestrator.modelrun.run`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from openai.lib.responses_tool_runner import ResponsesToolCheckpoint, ResponsesToolLedger

from cubicle.orchestrator.errors import ConfigError

__all__ = ["LEDGER_FILE", "PENDING_FILE", "RunLedger", "SavedLedger", "load_ledger"]

LEDGER_FILE: Final = "ledger.json"
PENDING_FILE: Final = "ledger-pending.json"


def _write_private(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` atomically, mode 0600, synced before the rename."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, separators=(",", ":"))
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


def completed_turns(checkpoint: ResponsesToolCheckpoint) -> int:
    """Model turns whose calls all returned, in a boundary's history (one call item each)."""
    return sum(
        1
        for item in cast(list[dict[str, Any]], checkpoint["history"])
        if isinstance(item, dict) and item.get("type") in ("computer_call", "function_call")
    )


class RunLedger:
    """The ``save`` of one run's ``ResponsesToolLedger`` (module docstring).

    :param folder: the run folder (exists).
    :param run_id: the ledger's run id (the SDK checks a resumed checkpoint carries it).
    :param on_turn_completed: called after each boundary save that follows completed calls
        (the first completed turn makes the sandbox resumable; later ones move its deadline).
    """

    def __init__(
        self,
        folder: Path,
        run_id: str,
        *,
        on_turn_completed: Callable[[], None] | None = None,
    ) -> None:
        self.folder = folder
        self.run_id = run_id
        self.on_turn_completed = on_turn_completed
        self.saves = 0

    def sdk_ledger(self, resume_from: ResponsesToolCheckpoint | None = None) -> ResponsesToolLedger:
        """The SDK's ledger, resuming from ``resume_from`` when given."""
        return ResponsesToolLedger(run_id=self.run_id, save=self.save, resume_from=resume_from)

    def save(self, checkpoint: ResponsesToolCheckpoint) -> None:
        """Commit ``checkpoint`` durably (module docstring)."""
        self.saves += 1
        if checkpoint["phase"] == "boundary":
            _write_private(self.folder / LEDGER_FILE, checkpoint)
            with_pending = self.folder / PENDING_FILE
            if with_pending.exists():
                with_pending.unlink()
            if checkpoint["returned_call_ids"] and self.on_turn_completed is not None:
                self.on_turn_completed()
            return
        pending = [
            {
                "call_id": item.get("call_id"),
                "type": item.get("type"),
                "actions": item.get("actions") or ([item["action"]] if item.get("action") else []),
            }
            for item in checkpoint["pending_items"]
            if isinstance(item, dict)
        ]
        _write_private(
            self.folder / PENDING_FILE,
            {
                "run_id": self.run_id,
                "phase": checkpoint["phase"],
                "revision": checkpoint["revision"],
                "attempted_call_ids": checkpoint["attempted_call_ids"],
                "returned_call_ids": checkpoint["returned_call_ids"],
                "pending_items": pending,
            },
        )


@dataclass(frozen=True)
class SavedLedger:
    """What a run folder's ledger says, for ``--resume``."""

    run_id: str
    checkpoint: ResponsesToolCheckpoint
    """The latest boundary: where the resumed loop continues."""
    uncertain: list[dict[str, Any]] = field(default_factory=list)
    """Calls attempted after that boundary (``call_id``, ``actions``): not in its history, some
    or all of their actions may have happened; settled by a fresh screenshot, never sent
    again."""

    @property
    def completed_turns(self) -> int:
        return completed_turns(self.checkpoint)

    @property
    def remaining_steps(self) -> int:
        return self.checkpoint["max_steps"] - self.checkpoint["consumed_requests"]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the ledger file {path} cannot be read: {exc}") from None


def load_ledger(folder: Path) -> SavedLedger:
    """The ledger of the run folder ``folder``.

    :raises ConfigError: naming what is missing or wrong: no ledger (not a runner-loop run, or it
        died before its first request), a run that already ended, a file that does not parse.
    """
    data = _read_json(folder / LEDGER_FILE)
    if data is None:
        raise ConfigError(
            f"{folder} has no ledger ({LEDGER_FILE}): only a --loop runner run that sent its "
            "first model request can be resumed"
        )
    if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
        raise ConfigError(f"the ledger {folder / LEDGER_FILE} is not a cubicle run ledger")
    run_id = str(data["run_id"])
    checkpoint = cast(ResponsesToolCheckpoint, data)
    pending = _read_json(folder / PENDING_FILE)
    uncertain: list[dict[str, Any]] = []
    if isinstance(pending, dict) and pending.get("revision", 0) > checkpoint.get("revision", 0):
        if pending.get("phase") == "final":
            raise ConfigError(f"the run in {folder} already ended: there is nothing to resume")
        returned = set(checkpoint.get("returned_call_ids") or [])
        items = {str(i.get("call_id")): i for i in pending.get("pending_items") or []}
        uncertain = [
            {"call_id": call_id, "actions": (items.get(call_id) or {}).get("actions") or []}
            for call_id in pending.get("attempted_call_ids") or []
            if call_id not in returned
        ]
    return SavedLedger(run_id, checkpoint, uncertain)
