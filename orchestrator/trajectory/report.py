"""Render a run folder's ``trajectory.jsonl`` as ``report.html``.

The report is one self-contained HTML file (inline CSS, no scripts, no network) that refers to
the screenshots by relative path (``shots/0003.png``), so the folder can be moved or archived.
Each screenshot the model saw becomes a *step*; the actions the model chose while looking at it
are drawn over it with an SVG overlay in model-view pixels (the image's own pixel grid): clicks
as numbered rings, double clicks as double rings, drags as paths, scrolls as arrows, moves as
crosses, typed text and key chords as captions. Approvals, SDK diagnostics, guest waits,
verification checks and errors are listed beside them.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from orchestrator.trajectory.recorder import read_trajectory
from orchestrator.view.report import handover_section, recording_section

__all__ = ["REPORT_FILE", "render_report", "write_report"]

REPORT_FILE = "report.html"

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em} h2{font-size:1.15em;margin:1.6em 0 .4em}
table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}
.ok{color:#1a7f37;font-weight:bold} .fail{color:#c62828;font-weight:bold}
.step{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:1em 0}
.shot{position:relative;display:inline-block;line-height:0;border:1px solid #999}
.shot img{display:block;max-width:100%;height:auto}
.shot svg{position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none}
.actions li{margin:.15em 0} code{background:#eee;padding:0 3px;border-radius:3px}
.muted{color:#777}
"""

_COLORS = {
    "left": "#e53935",
    "right": "#1e88e5",
    "wheel": "#8e24aa",
    "back": "#6d4c41",
    "forward": "#6d4c41",
}


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


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


def _overlay(actions: list[dict[str, Any]], size: tuple[int, int]) -> str:
    """SVG drawn over one screenshot, in its pixel grid (viewBox = image size)."""
    width, height = size
    radius = max(6, width // 90)
    parts = [
        f'<svg class="overlay" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" '
        'preserveAspectRatio="none">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="8" refY="5" markerWidth="6" '
        'markerHeight="6" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#ff9800"/></marker></defs>',
    ]
    captions: list[str] = []
    for number, action in enumerate(actions, start=1):
        kind = action.get("type")
        model = action.get("model") or {}
        point = _point(model)
        label = (
            f'<text x="{{x}}" y="{{y}}" font-size="{radius * 2}" fill="#fff" stroke="#000" '
            f'stroke-width="0.6" font-weight="bold">{number}</text>'
        )
        if kind in ("click", "double_click") and point:
            x, y = point
            color = _COLORS.get(str(model.get("button", "left")), "#e53935")
            parts.append(
                f'<circle class="mark mark-{kind}" cx="{x}" cy="{y}" r="{radius}" fill="none" '
                f'stroke="{color}" stroke-width="3"/>'
            )
            if kind == "double_click":
                parts.append(
                    f'<circle cx="{x}" cy="{y}" r="{radius * 1.7:.1f}" fill="none" '
                    f'stroke="{color}" stroke-width="2"/>'
                )
            parts.append(f'<circle cx="{x}" cy="{y}" r="2" fill="{color}"/>')
            parts.append(label.format(x=x + radius + 2, y=y - radius))
        elif kind == "move" and point:
            x, y = point
            parts.append(
                f'<path class="mark mark-move" d="M{x - radius},{y} H{x + radius} '
                f"M{x},{y - radius} "
                f'V{y + radius}" stroke="#00897b" stroke-width="2"/>'
            )
            parts.append(label.format(x=x + radius + 2, y=y - radius))
        elif kind == "scroll" and point:
            x, y = point
            dx, dy = model.get("scroll_x", 0), model.get("scroll_y", 0)
            length = 4 * radius
            norm = max(1.0, (float(dx) ** 2 + float(dy) ** 2) ** 0.5)
            ex, ey = x + length * float(dx) / norm, y + length * float(dy) / norm
            parts.append(
                f'<circle class="mark mark-scroll" cx="{x}" cy="{y}" r="{radius}" fill="none" '
                f'stroke="#ff9800" stroke-width="3"/>'
            )
            parts.append(
                f'<line x1="{x}" y1="{y}" x2="{ex:.1f}" y2="{ey:.1f}" stroke="#ff9800" '
                'stroke-width="3" marker-end="url(#arrow)"/>'
            )
            parts.append(label.format(x=x + radius + 2, y=y - radius))
        elif kind == "drag":
            points = [p for p in (_point(item) for item in model.get("path") or []) if p]
            if points:
                path = " ".join(f"{x},{y}" for x, y in points)
                parts.append(
                    f'<polyline class="mark mark-drag" points="{path}" fill="none" '
                    'stroke="#fdd835" '
                    'stroke-width="3" marker-end="url(#arrow)"/>'
                )
                sx, sy = points[0]
                parts.append(f'<circle cx="{sx}" cy="{sy}" r="{radius / 2:.1f}" fill="#fdd835"/>')
                parts.append(label.format(x=sx + radius, y=sy - radius))
        elif kind == "type":
            captions.append(
                f"{number}. type {json.dumps(action.get('text', ''), ensure_ascii=False)}"
            )
        elif kind == "keypress":
            captions.append(f"{number}. keys {'+'.join(map(str, action.get('keys') or []))}")
        elif kind == "wait":
            captions.append(f"{number}. wait")
    if captions:
        line = max(14, height // 40)
        top = height - line * len(captions) - line // 2
        parts.append(
            f'<rect x="0" y="{top - line}" width="{width}" height="{height - top + line}" '
            'fill="#000" fill-opacity="0.6"/>'
        )
        for offset, caption in enumerate(captions):
            parts.append(
                f'<text class="caption" x="8" y="{top + offset * line}" font-size="{line - 2}" '
                f'fill="#fff" font-family="monospace">{_esc(caption)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _describe(action: dict[str, Any]) -> str:
    kind = _esc(action.get("type"))
    model, native = action.get("model") or {}, action.get("native") or {}
    bits = [f"<b>{kind}</b>"]
    point, screen = _point(model), _point(native)
    if point:
        bits.append(f"model ({point[0]}, {point[1]})")
    if screen:
        bits.append(f"→ screen ({screen[0]}, {screen[1]})")
    if action.get("type") == "drag":
        bits.append(f"path of {len(model.get('path') or [])} points")
        native_path = native.get("path") if isinstance(native, dict) else None
        if native_path:
            bits.append(
                "→ screen " + " ".join(f"({p['x']},{p['y']})" for p in native_path if _point(p))
            )
    if "text" in action:
        bits.append(f"text <code>{_esc(json.dumps(action['text'], ensure_ascii=False))}</code>")
    if action.get("keys"):
        bits.append(f"keys <code>{_esc('+'.join(map(str, action['keys'])))}</code>")
    if isinstance(action.get("duration_ms"), int | float):
        bits.append(f'<span class="muted">{action["duration_ms"]:.0f} ms</span>')
    receipt = action.get("receipt")
    if isinstance(receipt, dict):
        bits.append(_receipt_html(receipt))
    if action.get("error"):
        bits.append(f'<span class="fail">failed: {_esc(action["error"])}</span>')
    return " ".join(bits)


def _receipt_html(receipt: dict[str, Any]) -> str:
    """One action's receipt: changed or not, settle time (capped?), focus change."""
    changed = "screen changed" if receipt.get("changed") else "no visible change"
    settle = f"settled in {receipt.get('settle_ms')} ms"
    if receipt.get("settled") is False:
        settle = f"cut at the cap after {receipt.get('settle_ms')} ms"
    before, after = receipt.get("focus_before"), receipt.get("focus_after")
    focus = ""
    if isinstance(after, dict) and (
        not isinstance(before, dict) or before.get("id") != after.get("id")
    ):
        focus = f"; focus → {_esc(str(after.get('title') or '?'))}"
    css = "muted" if receipt.get("changed") else "fail"
    return f'<span class="receipt {css}">[{changed}, {settle}{focus}]</span>'


def render_report(folder: Path) -> str:
    """Build the HTML text of ``folder``'s report from its trajectory."""
    events = read_trajectory(folder)
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_kind[str(event.get("kind"))].append(event)
    run = (by_kind.get("run") or [{}])[0]
    end = (by_kind.get("end") or [{}])[-1]
    actions_after: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for action in by_kind.get("action", []):
        actions_after[action.get("after_shot")].append(action)

    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>cubicle run: {_esc(run.get('task', ''))[:80]}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    verdict = end.get("ok")
    status = (
        '<span class="ok">succeeded</span>'
        if verdict
        else '<span class="fail">failed</span>'
        if verdict is False
        else '<span class="fail">unfinished</span>'
    )
    out.append(f"<h1>cubicle run {status}</h1><table>")
    for key, value in (
        ("task", run.get("task")),
        ("loop", run.get("loop")),
        ("model", run.get("model")),
        ("screen", run.get("screen")),
        ("model view", run.get("model_view")),
        ("final message", end.get("final_message")),
        ("wall time (s)", end.get("wall_s")),
    ):
        out.append(f"<tr><th>{_esc(key)}</th><td>{_esc(value)}</td></tr>")
    out.append("</table>")

    checks = by_kind.get("check", [])
    if checks:
        out.append(
            '<h2>Verification</h2><table id="checks"><tr><th>check</th><th>result</th>'
            "<th>expected</th><th>got</th></tr>"
        )
        for check in checks:
            cls, word = ("ok", "ok") if check.get("ok") else ("fail", "FAILED")
            out.append(
                f'<tr><td>{_esc(check.get("name"))}</td><td class="{cls}">{word}</td>'
                f"<td><code>{_esc(_json(check.get('expected')))}</code></td>"
                f"<td><code>{_esc(_json(check.get('got')))}</code></td></tr>"
            )
        out.append("</table>")
    errors = by_kind.get("error", [])
    if errors:
        out.append('<h2>Errors</h2><ul id="errors">')
        out.extend(
            f'<li class="fail">{_esc(e.get("where"))}: {_esc(e.get("type"))}: '
            f"{_esc(e.get('message'))}</li>"
            for e in errors
        )
        out.append("</ul>")

    approvals = by_kind.get("approval", [])
    if approvals:
        out.append(
            '<h2>Approval decisions</h2><table id="approvals"><tr><th>t (s)</th><th>subject</th>'
            "<th>decision</th><th>by</th><th>reason</th></tr>"
        )
        for item in approvals:
            cls, word = ("ok", "allowed") if item.get("allowed") else ("fail", "denied")
            out.append(
                f"<tr><td>{_esc(item.get('t'))}</td><td>{_esc(item.get('subject'))} "
                f'{_esc(item.get("detail") or "")}</td><td class="{cls}">{word}</td>'
                f"<td>{_esc(item.get('by'))}</td><td>{_esc(item.get('reason'))}</td></tr>"
            )
        out.append("</table>")

    origins = by_kind.get("origin_access", [])
    if origins:
        out.append(
            '<h2>Origin access</h2><table id="origin-access"><tr><th>t (s)</th><th>origin</th>'
            "<th>answer</th><th>by</th></tr>"
        )
        for item in origins:
            cls = "ok" if item.get("answer") == "approve" else "fail"
            out.append(
                f"<tr><td>{_esc(item.get('t'))}</td><td>{_esc(item.get('origin'))}</td>"
                f'<td class="{cls}">{_esc(item.get("answer"))}</td>'
                f"<td>{_esc(item.get('by'))}</td></tr>"
            )
        out.append("</table>")

    out.extend(handover_section(by_kind.get("handover", [])))
    out.extend(recording_section(by_kind.get("recording", [])))
    out.append("<h2>Steps</h2>")
    if actions_after.get(None):
        out.append(
            '<section class="step" id="step-start"><h3>Before the first screenshot</h3>'
            '<ol class="actions">'
        )
        out.extend(f"<li>{_describe(a)}</li>" for a in actions_after[None])
        out.append("</ol></section>")
    for shot in by_kind.get("screenshot", []):
        index = shot.get("index")
        size = shot.get("size") or [0, 0]
        following = actions_after.get(index, [])
        out.append(
            f'<section class="step" id="step-{_esc(index)}" data-shot="{_esc(shot.get("file"))}">'
            f'<h3>Step {_esc(index)} <span class="muted">t={_esc(shot.get("t"))} s, '
            f"{len(following)} action(s) on this screen"
            f"{'; ' + _esc(shot['note']) if shot.get('note') else ''}</span></h3>"
        )
        out.append(
            f'<div class="shot"><img src="{_esc(shot.get("file"))}" width="{_esc(size[0])}" '
            f'height="{_esc(size[1])}" alt="screenshot {_esc(index)}">'
            f"{_overlay(following, (int(size[0]), int(size[1])))}</div>"
        )
        seen = [e for e in by_kind.get("expectation", []) if e.get("shot") == index]
        if seen:
            out.append('<ul class="sees">')
            out.extend(
                f'<li class="{"ok" if e.get("ok") else "fail"}">'
                f"{'seen' if e.get('ok') else 'NOT seen'}: {_esc(e.get('expected'))}"
                f"{'' if e.get('ok') else ' — ' + _esc(e.get('got'))}</li>"
                for e in seen
            )
            out.append("</ul>")
        if following:
            out.append('<ol class="actions">')
            out.extend(f"<li>{_describe(a)}</li>" for a in following)
            out.append("</ol>")
        out.append("</section>")

    turns = by_kind.get("model_turn", [])
    if turns:
        out.append(
            '<h2>Model turns</h2><table id="turns"><tr><th>#</th><th>response</th><th>calls</th>'
            "<th>message</th><th>ms</th></tr>"
        )
        for turn in turns:
            calls = turn.get("calls") or []
            summary = "; ".join(
                f"{c.get('call_id')}: "
                + ", ".join(str(a.get("type")) for a in c.get("actions") or [])
                + (
                    " [safety checks: "
                    + ", ".join(str(s.get("code")) for s in c.get("pending_safety_checks"))
                    + "]"
                    if c.get("pending_safety_checks")
                    else ""
                )
                for c in calls
            )
            duration = turn.get("duration_ms")
            out.append(
                f"<tr><td>{_esc(turn.get('index'))}</td><td>{_esc(turn.get('response_id'))}</td>"
                f"<td>{_esc(summary)}</td><td>{_esc(turn.get('message') or '')}</td>"
                f"<td>{_esc(_ms(duration))}</td></tr>"
            )
        out.append("</table>")

    diagnostics = by_kind.get("diagnostic", [])
    waits = by_kind.get("guest_wait", [])
    if diagnostics or waits:
        out.append(
            '<h2>Timings</h2><table id="timings"><tr><th>source</th><th>what</th><th>count</th>'
            "<th>total ms</th></tr>"
        )
        totals: dict[tuple[str, str], list[float]] = defaultdict(list)
        for diag in diagnostics:
            sdk_key = (
                "sdk",
                f"{diag.get('api')}/{diag.get('stage')}/{diag.get('reason')} "
                f"{diag.get('member') or ''}",
            )
            totals[sdk_key].append(float(diag.get("duration_ms") or 0.0))
        for wait in waits:
            totals[("guest wait", str(wait.get("op")))].append(
                float(wait.get("duration_ms") or 0.0)
            )
        for (source, what), values in sorted(totals.items()):
            out.append(
                f"<tr><td>{_esc(source)}</td><td>{_esc(what)}</td><td>{len(values)}</td>"
                f"<td>{sum(values):.0f}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>\n")
    return "".join(out)


def write_report(folder: Path) -> Path:
    """Write ``folder/report.html`` from ``folder/trajectory.jsonl``; return its path."""
    path = folder / REPORT_FILE
    path.write_text(render_report(folder), encoding="utf-8")
    return path
