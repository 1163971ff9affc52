"""Python verifiers of the shipped tasks (``[[checks]] verifier = "module:function"``).

A verifier gets the agent client after the model's final message and returns a bool, a
:class:`~cubicle.orchestrator.modelrun.verify.Check` or a list of them. It reads the guest's real
state; it never trusts what the model said.
"""

from __future__ import annotations

from cubicle.orchestrator.modelrun.guest_steps import guest_home
from cubicle.orchestrator.modelrun.verify import Check
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError

__all__ = ["count_matches_words", "notes_draft_renamed_away", "report_moved_away"]


def count_matches_words(client: AgentClient) -> Check:
    """``~/task/count.txt`` holds the number of lines of ``~/task/words.txt`` with a ``q``
    (computed here from the file as it is now, so a model that edited words.txt fails)."""
    folder = f"{guest_home(client)}/task"
    words = client.read_file(f"{folder}/words.txt", timeout=15).blob
    expected = sum(1 for line in words.decode("utf-8").splitlines() if "q" in line)
    try:
        saved = client.read_file(f"{folder}/count.txt", timeout=15).blob
    except GuestError as exc:
        return Check("count matches words.txt", False, expected, None, str(exc))
    got = saved.decode("utf-8", "replace").strip()
    return Check(
        "count matches words.txt",
        got == str(expected),
        str(expected),
        got,
        "" if got == str(expected) else "count.txt does not hold the count of words.txt",
    )


def _gone(client: AgentClient, name: str, relative: str) -> Check:
    """Nothing is at ``relative`` (to the guest user's home) any more."""
    kind = client.file_stat(relative, timeout=15).result.get("kind")
    return Check(
        name,
        kind is None,
        None,
        kind,
        "" if kind is None else f"~/{relative} is still there (a {kind})",
    )


def notes_draft_renamed_away(client: AgentClient) -> Check:
    """``files-rename``: ``~/task/notes-draft.txt`` is gone (renamed, not copied)."""
    return _gone(client, "notes-draft.txt no longer in the folder", "task/notes-draft.txt")


def report_moved_away(client: AgentClient) -> Check:
    """``files-drag``: ``~/task/report.txt`` is gone (moved into archive, not copied)."""
    return _gone(client, "report.txt no longer beside the archive folder", "task/report.txt")
