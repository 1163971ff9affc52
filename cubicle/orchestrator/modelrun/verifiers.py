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

__all__ = ["count_matches_words"]


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
