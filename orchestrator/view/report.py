"""The hand-over section of a run's report.html (:mod:`orchestrator.trajectory.report`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

__all__ = ["handover_section", "recording_section"]

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
        "<th>held (s)</th><th>the person's actions</th><th>reason</th></tr>"
    ]
    for event in events:
        state = str(event.get("state"))
        cells = (
            event.get("t"),
            _WHAT.get(state, state),
            event.get("by", ""),
            event.get("held_s", ""),
            _actions(event.get("person_actions") or []),
            event.get("reason", ""),
        )
        out.append(
            f'<tr class="handover-{html.escape(state)}">'
            + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells)
            + "</tr>"
        )
    out.append("</table>")
    return out


def recording_section(events: Sequence[dict[str, Any]]) -> list[str]:
    """The video of the run (``recording`` event), linked and playable; or why there is none."""
    if not events:
        return []
    event = events[-1]
    file = event.get("file")
    if not file:
        return [f'<h2>Recording</h2><p class="fail">{html.escape(str(event.get("error")))}</p>']
    src = html.escape(str(file), quote=True)
    size = int(event.get("bytes") or 0) / 1e6
    return [
        f'<h2>Recording</h2><p><a id="recording" href="{src}">{src}</a> '
        f"({html.escape(str(event.get('frames')))} frames, "
        f"{html.escape(str(event.get('duration_s')))} s, {size:.2f} MB)</p>",
        f'<video controls preload="metadata" width="640" src="{src}"></video>',
    ]


def _actions(actions: Sequence[dict[str, Any]]) -> str:
    """``click 1 at (123, 456) +0.4 s; 3 key presses`` (keys are never named)."""
    clicks = [
        f"click {a.get('button')} at ({a.get('x')}, {a.get('y')}) +{a.get('after_s')} s"
        for a in actions
        if a.get("kind") == "click"
    ]
    keys = sum(1 for a in actions if a.get("kind") == "key")
    return "; ".join(clicks + ([f"{keys} key presses"] if keys else []))
