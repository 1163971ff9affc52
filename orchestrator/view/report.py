"""The hand-over section of a run's report.html (:mod:`orchestrator.trajectory.report`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

__all__ = ["handover_section"]

_WHAT = {
    "requested": "control handed to a person",
    "taken": "a person has control: the agent waits",
    "released": "control given back: the agent resumes",
    "cancelled": "the run was cancelled while a person had control",
}


def handover_section(events: Sequence[dict[str, Any]]) -> list[str]:
    """HTML rows for the ``handover`` events (none: no section). Everything that happened on
    screen between ``taken`` and ``released`` was the person's doing, not the model's."""
    if not events:
        return []
    out = [
        '<h2>Hand-over</h2><table id="handover"><tr><th>t (s)</th><th>what</th><th>by</th>'
        "<th>held (s)</th><th>reason</th></tr>"
    ]
    for event in events:
        state = str(event.get("state"))
        cells = (
            event.get("t"),
            _WHAT.get(state, state),
            event.get("by", ""),
            event.get("held_s", ""),
            event.get("reason", ""),
        )
        out.append(
            f'<tr class="handover-{html.escape(state)}">'
            + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells)
            + "</tr>"
        )
    out.append("</table>")
    return out
