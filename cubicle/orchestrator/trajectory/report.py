"""Render a run folder's ``trajectory.jsonl`` as ``report.html``.

The report is one self-contained HTML file (inline CSS, no scripts, no network) that refers to
the screenshots by relative path (``shots/0003.png``), so the folder can be moved or archived.
Each screenshot the model saw becomes a *step*; the actions the model chose while looking at it
are drawn over it with an SVG overlay in model-view pixels (the image's own pixel grid): clicks
as numbered rings, double clicks as double rings, drags as paths, scrolls as arrows, moves as
crosses, typed text and key chords as captions. Approvals, stall warnings, SDK diagnostics,
guest waits, hand-overs, verification checks and errors are listed beside them.

The markup is the Jinja2 template ``templates/report.html.j2`` (package data), rendered with
autoescape on, so every text from the trajectory (the task, typed text, the model's messages,
window titles) is escaped once, by the template engine; and with ``StrictUndefined``, so a
variable the template names and this module does not give fails the render instead of
rendering empty. This module never builds markup: it groups the events by kind (the template
reads their fields with ``.get``, as a field may be absent) and computes what needs arithmetic
(the overlay's geometry, timings).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from cubicle.orchestrator.trajectory.recorder import read_trajectory

__all__ = [
    "REPORT_FILE",
    "TEMPLATE",
    "render_events",
    "render_report",
    "report_context",
    "report_environment",
    "write_report",
]

REPORT_FILE = "report.html"
TEMPLATE = "report.html.j2"

_COLORS = {
    "left": "#e53935",
    "right": "#1e88e5",
    "wheel": "#8e24aa",
    "back": "#6d4c41",
    "forward": "#6d4c41",
}


@cache
def report_environment() -> jinja2.Environment:
    """The Jinja2 environment of the report: the package's templates, autoescape, strict
    undefined variables, the report's filters (``json``, ``calls``, ``person_actions``, ``ms``)."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("cubicle.orchestrator.trajectory", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(json=_json, calls=_calls, person_actions=_person_actions, ms=_ms)
    return environment


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _ms(value: object) -> str:
    return str(round(value)) if isinstance(value, int | float) else ""


def _point(value: object) -> tuple[int, int] | None:
    if (
        isinstance(value, dict)
        and isinstance(value.get("x"), int)
        and isinstance(value.get("y"), int)
    ):
        return value["x"], value["y"]
    return None


def _overlay(actions: list[dict[str, Any]], size: tuple[int, int]) -> dict[str, Any]:
    """What the SVG over one screenshot draws, in its pixel grid (viewBox = image size): one
    mark per pointer action (numbered), one caption per typed text, key chord or wait."""
    width, height = size
    radius = max(6, width // 90)
    marks: list[dict[str, Any]] = []
    captions: list[str] = []
    for number, action in enumerate(actions, start=1):
        kind = action.get("type")
        model = action.get("model") or {}
        point = _point(model)
        mark: dict[str, Any] | None = None
        if kind in ("click", "double_click", "move", "scroll") and point:
            x, y = point
            mark = {"x": x, "y": y, "label": (x + radius + 2, y - radius)}
            if kind == "scroll":
                dx, dy = float(model.get("scroll_x", 0)), float(model.get("scroll_y", 0))
                norm = max(1.0, (dx**2 + dy**2) ** 0.5)
                mark["end"] = (
                    f"{x + 4 * radius * dx / norm:.1f}",
                    f"{y + 4 * radius * dy / norm:.1f}",
                )
            elif kind != "move":
                mark["color"] = _COLORS.get(str(model.get("button", "left")), "#e53935")
                mark["outer"] = f"{radius * 1.7:.1f}"
        elif kind == "drag":
            points = [p for p in (_point(item) for item in model.get("path") or []) if p]
            if points:
                sx, sy = points[0]
                mark = {
                    "x": sx,
                    "y": sy,
                    "label": (sx + radius, sy - radius),
                    "points": " ".join(f"{x},{y}" for x, y in points),
                    "start": f"{radius / 2:.1f}",
                }
        elif kind == "type":
            captions.append(f"{number}. type {_json(action.get('text', ''))}")
        elif kind == "keypress":
            captions.append(f"{number}. keys {'+'.join(map(str, action.get('keys') or []))}")
        elif kind == "wait":
            captions.append(f"{number}. wait")
        if mark is not None:
            marks.append({"kind": kind, "number": number, **mark})
    line = max(14, height // 40)
    top = height - line * len(captions) - line // 2
    return {
        "width": width,
        "height": height,
        "radius": radius,
        "marks": marks,
        "captions": captions,
        "line": line,
        "top": top,
    }


def _action(action: dict[str, Any]) -> dict[str, Any]:
    """One action's line under its step: coordinates, text, keys, time, receipt, failure."""
    model, native = action.get("model") or {}, action.get("native") or {}
    native_path = native.get("path") if isinstance(native, dict) else None
    receipt = action.get("receipt")
    duration = action.get("duration_ms")
    return {
        "type": action.get("type"),
        "model": _point(model),
        "screen": _point(native),
        "drag_points": len(model.get("path") or []) if action.get("type") == "drag" else None,
        "screen_path": " ".join(f"({p['x']},{p['y']})" for p in native_path or [] if _point(p)),
        "text": _json(action["text"]) if "text" in action else None,
        "chord": "+".join(map(str, action["keys"])) if action.get("keys") else None,
        "duration_ms": f"{duration:.0f}" if isinstance(duration, int | float) else None,
        "receipt": _receipt(receipt) if isinstance(receipt, dict) else None,
        "error": action.get("error") or None,
    }


def _receipt(receipt: dict[str, Any]) -> dict[str, Any]:
    """One action's receipt: changed or not, settle time (capped?), focus change."""
    before, after = receipt.get("focus_before"), receipt.get("focus_after")
    focus = None
    if isinstance(after, dict) and (
        not isinstance(before, dict) or before.get("id") != after.get("id")
    ):
        focus = str(after.get("title") or "?")
    settle_ms = receipt.get("settle_ms")
    return {
        "changed": bool(receipt.get("changed")),
        "settle": f"cut at the cap after {settle_ms} ms"
        if receipt.get("settled") is False
        else f"settled in {settle_ms} ms",
        "focus": focus,
    }


def _calls(calls: Sequence[dict[str, Any]]) -> str:
    """A model turn's calls: ``call_1: click, type [safety checks: code]; call_2: …``."""
    return "; ".join(
        f"{c.get('call_id')}: "
        + ", ".join(str(a.get("type")) for a in c.get("actions") or [])
        + (
            " [safety checks: "
            + ", ".join(str(s.get("code")) for s in c["pending_safety_checks"])
            + "]"
            if c.get("pending_safety_checks")
            else ""
        )
        for c in calls
    )


def _person_actions(actions: Sequence[dict[str, Any]]) -> str:
    """``click 1 at (123, 456) +0.4 s; paste +2.1 s; 3 key presses`` (keys and pasted texts
    are never named)."""
    shown = [
        f"click {a.get('button')} at ({a.get('x')}, {a.get('y')}) +{a.get('after_s')} s"
        if a.get("kind") == "click"
        else f"paste +{a.get('after_s')} s"
        for a in actions
        if a.get("kind") in ("click", "paste")
    ]
    keys = sum(1 for a in actions if a.get("kind") == "key")
    return "; ".join(shown + ([f"{keys} key presses"] if keys else []))


def _timings(
    diagnostics: Sequence[dict[str, Any]], waits: Sequence[dict[str, Any]]
) -> list[tuple[str, str, int, str]]:
    """(source, what, count, total ms) of the SDK's diagnostics and the guest waits."""
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)
    for diag in diagnostics:
        what = (
            f"{diag.get('api')}/{diag.get('stage')}/{diag.get('reason')} {diag.get('member') or ''}"
        )
        totals[("sdk", what)].append(float(diag.get("duration_ms") or 0.0))
    for wait in waits:
        totals[("guest wait", str(wait.get("op")))].append(float(wait.get("duration_ms") or 0.0))
    return [
        (source, what, len(values), f"{sum(values):.0f}")
        for (source, what), values in sorted(totals.items())
    ]


def report_context(events: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The template's variables from a trajectory's events (every one the template names).

    Plain records (checks, errors, approvals …) go to the template as the events themselves,
    read there with ``.get``; steps and actions are prepared here (the overlay's geometry).
    """
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_kind[str(event.get("kind"))].append(event)
    run = (by_kind["run"] or [{}])[0]
    actions_after: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for action in by_kind["action"]:
        actions_after[action.get("after_shot")].append(action)
    steps = []
    for shot in by_kind["screenshot"]:
        size = shot.get("size") or [0, 0]
        following = actions_after[shot.get("index")]
        steps.append(
            {
                "shot": shot,
                "size": size,
                "overlay": _overlay(following, (int(size[0]), int(size[1]))),
                "sees": [e for e in by_kind["expectation"] if e.get("shot") == shot.get("index")],
                "actions": [_action(a) for a in following],
            }
        )
    return {
        "title": str(run.get("task", ""))[:80],
        "run": run,
        "end": (by_kind["end"] or [{}])[-1],
        "checks": by_kind["check"],
        "errors": by_kind["error"],
        "failure_screens": by_kind["failure_screen"],
        "warnings": by_kind["warning"],
        "approvals": by_kind["approval"],
        "origins": by_kind["origin_access"],
        "handovers": by_kind["handover"],
        "recording": by_kind["recording"][-1] if by_kind["recording"] else None,
        "before_first_shot": [_action(a) for a in actions_after[None]],
        "steps": steps,
        "turns": by_kind["model_turn"],
        "requests": by_kind["model_request"],
        "timings": _timings(by_kind["diagnostic"], by_kind["guest_wait"]),
    }


def render_report(folder: Path) -> str:
    """Build the HTML text of ``folder``'s report from its trajectory."""
    return render_events(read_trajectory(folder))


def render_events(events: Sequence[dict[str, Any]]) -> str:
    """The report's HTML for ``events`` (a trajectory's, in order)."""
    return report_environment().get_template(TEMPLATE).render(report_context(events))


def write_report(folder: Path) -> Path:
    """Write ``folder/report.html`` from ``folder/trajectory.jsonl``; return its path."""
    path = folder / REPORT_FILE
    path.write_text(render_report(folder), encoding="utf-8")
    return path
