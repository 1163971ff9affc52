"""The trajectory recorder writes events and screenshots; report.html renders in Chromium."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, cast

import jinja2
import pytest
from PIL import Image
from playwright.sync_api import sync_playwright

from cubicle.orchestrator.trajectory import (
    TRAJECTORY_FILE,
    TrajectoryRecorder,
    read_trajectory,
    write_report,
)
from cubicle.orchestrator.trajectory.report import (
    TEMPLATE,
    render_events,
    report_context,
    report_environment,
)
from tests.support.pages import (
    CHROMIUM,
    assert_no_csp_violations,
    csp_violations,
    new_context,
)


def _png(color: tuple[int, int, int], size: tuple[int, int] = (320, 200)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def _record_sample(folder: Path) -> None:
    with TrajectoryRecorder(folder) as recorder:
        recorder.event(
            "run",
            task="demo <task> & more",
            loop="toolset",
            model="m",
            screen=[640, 400],
            model_view=[320, 200],
            meta={},
        )
        recorder.screenshot(_png((200, 30, 30)), size=(320, 200))
        recorder.action(
            type="click",
            model={"x": 10, "y": 20, "button": "left"},
            native={"x": 20, "y": 40},
            duration_ms=1.5,
        )
        recorder.action(
            type="type", model={}, native=None, text="Grêmio <b> & 日本", duration_ms=2.0
        )
        recorder.event(
            "approval",
            subject="safety_check",
            allowed=True,
            by="approve-all",
            reason="drill",
            detail="irreversible_action",
        )
        recorder.screenshot(_png((30, 200, 30)), size=(320, 200))
        recorder.action(
            type="drag",
            model={"path": [{"x": 1, "y": 2}, {"x": 100, "y": 150}]},
            native={"path": [{"x": 2, "y": 4}, {"x": 200, "y": 300}]},
            duration_ms=3,
        )
        recorder.action(
            type="scroll",
            model={"x": 50, "y": 60, "scroll_x": 0, "scroll_y": 300},
            native={"x": 100, "y": 120},
        )
        recorder.action(type="keypress", model={}, native=None, keys=["CTRL", "S"])
        recorder.event("check", name="note", ok=False, expected="a\n", got="b\n", detail="differs")
        recorder.event("end", ok=False, final_message="done", wall_s=1.0)
    write_report(folder)


def test_recorder_writes_jsonl_and_screenshots(tmp_path: Path) -> None:
    _record_sample(tmp_path)
    events = read_trajectory(tmp_path)
    kinds = [e["kind"] for e in events]
    assert kinds.count("screenshot") == 2 and kinds.count("action") == 5
    shots = [e for e in events if e["kind"] == "screenshot"]
    assert [s["file"] for s in shots] == ["shots/0000.png", "shots/0001.png"]
    assert all((tmp_path / s["file"]).is_file() for s in shots)
    actions = [e for e in events if e["kind"] == "action"]
    assert [a["after_shot"] for a in actions] == [0, 0, 1, 1, 1]
    times = [e["t"] for e in events]
    assert times == sorted(times)
    # every line is one JSON object
    lines = (tmp_path / TRAJECTORY_FILE).read_text(encoding="utf-8").splitlines()
    assert all(isinstance(json.loads(line), dict) for line in lines)


def test_report_html_is_self_contained_and_escapes_text(tmp_path: Path) -> None:
    _record_sample(tmp_path)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "demo &lt;task&gt; &amp; more" in html
    assert "<b> &" not in html  # typed text is escaped, never markup
    external = re.findall(r'(?:src|href)="(?:https?:)?//', html)
    assert external == [], "the report must not load anything from the network"
    assert "<script" not in html
    assert html.count('class="step"') == 2
    assert 'src="shots/0000.png"' in html and 'src="shots/0001.png"' in html
    for mark in ("mark-click", "mark-drag", "mark-scroll"):
        assert mark in html
    assert "expected" in html and "FAILED" in html


HOSTILE = """<script>alert(1)</script>" onload="alert(2)" '&amp;"""
"""Text a model, a page or a guest window can put into a trajectory."""


class _Page(HTMLParser):
    """The parsed report: every start tag with its attributes, and the text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _hostile_events() -> list[dict[str, Any]]:
    shot = f"shots/0000.png{HOSTILE}"
    return [
        {"kind": "run", "t": 0, "task": HOSTILE, "loop": "toolset", "model": HOSTILE},
        {"kind": "screenshot", "t": 0.1, "index": 0, "file": shot, "size": [320, 200]},
        {"kind": "screenshot", "t": 0.2, "index": 1, "file": "s.png", "note": HOSTILE},
        *(
            {"kind": "action", "t": 0.3, "after_shot": 0, "type": kind, **fields}
            for kind, fields in (
                ("type", {"text": HOSTILE}),
                ("keypress", {"keys": ["CTRL", HOSTILE]}),
                ("click", {"model": {"x": 1, "y": 2}, "error": HOSTILE}),
                (
                    "click",
                    {
                        "model": {"x": 3, "y": 4},
                        "receipt": {"changed": True, "focus_after": {"id": 1, "title": HOSTILE}},
                    },
                ),
            )
        ),
        {"kind": "expectation", "shot": 0, "ok": False, "expected": HOSTILE, "got": HOSTILE},
        {"kind": "approval", "subject": "action", "by": HOSTILE, "reason": HOSTILE},
        {"kind": "origin_access", "origin": HOSTILE, "answer": HOSTILE, "by": HOSTILE},
        {"kind": "handover", "state": HOSTILE, "by": HOSTILE, "reason": HOSTILE},
        {"kind": "warning", "what": "stall", "message": HOSTILE},
        {"kind": "recording", "file": HOSTILE, "frames": 1, "duration_s": 1, "bytes": 1},
        {"kind": "model_turn", "index": 0, "response_id": HOSTILE, "message": HOSTILE},
        {"kind": "guest_wait", "op": HOSTILE, "duration_ms": 1},
        {"kind": "check", "name": HOSTILE, "ok": False, "expected": HOSTILE, "got": HOSTILE},
        {"kind": "error", "where": "run", "type": "E", "message": HOSTILE},
        {"kind": "end", "ok": False, "final_message": HOSTILE},
    ]


def test_hostile_text_in_a_trajectory_stays_text_in_the_report() -> None:
    html = render_events(_hostile_events())
    page = _Page(html)
    assert [tag for tag, _ in page.tags if tag == "script"] == []
    assert all(not name.startswith("on") for _, attrs in page.tags for name in attrs), (
        "an attribute was injected"
    )
    assert "<script>" not in html and 'onload="alert' not in html
    # exactly the bytes autoescape writes: < > & " ' each as an entity
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;&#34; onload=&#34;alert(2)&#34; &#39;&amp;amp;"
        in html
    )
    text = "".join(page.text)
    # shown as the text it was, where it was: task, typed text (JSON), keys, error, focus title,
    # expectation, approval, origin, hand-over, warning, turn, wait, check, error, final message
    assert text.count(HOSTILE) >= 15
    assert json.dumps(HOSTILE) in text  # the typed text, as the model sent it
    srcs = [attrs.get("src") for tag, attrs in page.tags if tag == "img"]
    assert srcs == [f"shots/0000.png{HOSTILE}", "s.png"]  # one attribute value, unbroken
    assert ("a", {"id": "recording", "href": HOSTILE}) in page.tags
    assert ("tr", {"class": f"handover-{HOSTILE}"}) in page.tags


def test_the_report_shows_a_stall_warning() -> None:
    message = "stalled: 3 state-changing actions in a row changed nothing visible"
    html = render_events([{"kind": "warning", "t": 1.5, "what": "stall", "message": message}])
    assert '<ul id="warnings">' in html
    assert f"t=1.5 s, stall: {message}" in "".join(_Page(html).text)


def test_a_variable_the_template_names_and_the_context_lacks_fails_the_render() -> None:
    template = report_environment().get_template(TEMPLATE)
    context = report_context(_hostile_events())
    assert "alert" in template.render(context)
    for name in context:
        with pytest.raises(jinja2.UndefinedError, match=name):
            template.render({k: v for k, v in context.items() if k != name})


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(
        "chromium is not installed (apt-get install chromium; scripts/host-packages/drill.txt)"
    )


def render_in_chromium(report: Path, profile: Path) -> str:
    """The DOM of ``report`` after headless Chromium loaded it (images included)."""
    result = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--allow-file-access-from-files",
            "--virtual-time-budget=5000",
            "--dump-dom",
            report.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def screenshot_in_chromium(report: Path, profile: Path, target: Path) -> Image.Image:
    result = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1000,1400",
            f"--screenshot={target}",
            report.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0 and target.is_file(), result.stderr[-2000:]
    return Image.open(target).convert("RGB")


def test_report_renders_in_headless_chromium_with_steps_and_images(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    _record_sample(folder)
    dom = render_in_chromium(folder / "report.html", tmp_path / "profile")
    assert len(re.findall(r'<section class="step"', dom)) == 2
    assert dom.count("<img") == 2
    shot = screenshot_in_chromium(
        folder / "report.html", tmp_path / "profile", tmp_path / "shot.png"
    )
    colors: set[tuple[int, int, int]] = {
        cast(tuple[int, int, int], color) for _, color in shot.getcolors(maxcolors=1 << 20) or []
    }
    # the red and green screenshots were drawn (images loaded from their relative paths)
    assert any(r > 150 and g < 80 and b < 80 for r, g, b in colors)
    assert any(g > 150 and r < 80 and b < 80 for r, g, b in colors)


def test_report_in_a_browser_loads_its_files_and_would_run_no_injected_script(
    tmp_path: Path,
) -> None:
    """The report's own policy (a meta tag: it is a file) lets its screenshots load and would
    stop any script or remote fetch that slipped past the escaping."""
    folder = tmp_path / "run"
    _record_sample(folder)
    report = folder / "report.html"
    hostile = folder / "hostile.html"
    hostile.write_text(
        report.read_text(encoding="utf-8").replace(
            "</body>",
            '<script>document.title = "ran"</script>'
            '<img id="remote" src="http://127.0.0.1:9/x.png"></body>',
        ),
        encoding="utf-8",
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = new_context(browser).new_page()
            page.goto(report.as_uri())
            page.wait_for_load_state("load")
            widths = page.evaluate("[...document.images].map((i) => i.naturalWidth)")
            assert len(widths) == 2 and all(w > 0 for w in widths), widths
            assert_no_csp_violations(page)

            page.goto(hostile.as_uri())
            page.wait_for_load_state("load")
            assert page.title() != "ran"
            blocked = {v["directive"] for v in csp_violations(page)}
            assert {"script-src-elem", "img-src"} <= blocked, blocked
        finally:
            browser.close()
