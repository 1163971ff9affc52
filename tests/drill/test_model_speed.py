"""What the model sees is what the screen shows: batches at model speed, no sleeps in the test.

Every test drives real apps (mousepad, chromium) on a local desktop through the real openai
``ComputerToolset`` loop against the scripted model, sends whole batches the way models do, and
asserts on the screenshots the SDK sent to the model — one per ``computer_call`` — as well as on
the receipts of each action and on the end state (file bytes, submitted form data).
"""

from __future__ import annotations

import http.server
import io
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest
from openai import AsyncComputerToolset, ComputerToolset, OpenAI
from openai.types.responses import computer_action as modern
from PIL import Image, ImageChops

from cubicle.drivers import ApproveAll, AsyncApprovals, AsyncGuestDriver, GuestDriver
from cubicle.drivers.errors import SettleOptionError
from cubicle.drivers.records import ActionRecord
from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.loop import RecordedSession
from cubicle.orchestrator.run_task import parse_settle
from cubicle.orchestrator.trajectory import read_trajectory
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle_guest.errors import GuestError
from cubicle_guest.protocol import VISIBLE_CHANGE_AREA
from tests.drill.desktop import LocalDesktop, app, wait_for_window
from tests.support.runs import scripted_run

pytestmark = [pytest.mark.x11, pytest.mark.slow]

BLUE = (0x33, 0x66, 0xCC)
PAGE = b"""<!doctype html><html><head><title>Blue page</title></head>
<body style="margin:0;background:#3366cc"><h1 style="color:white">Loaded</h1></body></html>"""
FORM = b"""<!doctype html><html><head><title>Form page</title></head>
<body style="margin:0;background:#ffffff">
<form action="/done" method="get">
<input id="a" name="a" style="position:absolute;left:100px;top:100px;width:300px;height:40px">
<input id="b" name="b" style="position:absolute;left:100px;top:200px;width:300px;height:40px">
<button style="position:absolute;left:100px;top:300px">Send</button>
</form></body></html>"""
DONE = b"""<!doctype html><html><head><title>Done page</title></head>
<body style="margin:0;background:#3366cc"><h1 style="color:white">Thanks</h1></body></html>"""


class Shots:
    """The driver's records: the screenshots the model received, and every action's receipt."""

    def __init__(self) -> None:
        self.images: list[Image.Image] = []
        self.actions: list[ActionRecord] = []

    def __call__(self, record: ActionRecord) -> None:
        if record.kind == "screenshot" and record.image is not None:
            self.images.append(Image.open(io.BytesIO(record.image)).convert("RGB"))
        elif record.kind != "screenshot":
            self.actions.append(record)


def _changed_area(before: Image.Image, after: Image.Image) -> int:
    box = ImageChops.difference(before, after).getbbox()
    return 0 if box is None else (box[2] - box[0]) * (box[3] - box[1])


def _run(desktop: LocalDesktop, turns: list[dict[str, Any]], shots: Shots) -> str:
    script = parse_script({"name": "model-speed", "turns": turns})
    with (
        desktop.connect() as client,
        GuestDriver(client, on_action=shots) as driver,
        ScriptedModel(script) as model,
        OpenAI(base_url=model.base_url, api_key="offline", max_retries=0) as openai_client,
    ):
        policy = ApproveAll(geometry=driver)
        driver.screenshot()  # what the screen looked like before the first turn
        response = ComputerToolset(driver).run(
            openai_client,
            {"model": "scripted", "input": "test"},
            approve_safety_checks=policy.approve_safety_checks,
            before_action=policy.before_action,
        )
        model.assert_finished()
        return response.output_text


@contextmanager
def _web_server() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    submitted: list[dict[str, list[str]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            body = {"/page": PAGE, "/form": FORM, "/done": DONE}.get(url.path)
            if url.path == "/done":
                submitted.append(urllib.parse.parse_qs(url.query))
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body or b"not found")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", submitted
    finally:
        server.shutdown()
        server.server_close()


def _chromium(desktop: LocalDesktop, *args: str) -> Any:
    # a browser run by a test on the host as root: outside the guest's no --no-sandbox rule
    return app(
        desktop,
        "chromium",
        "--no-sandbox",
        "--test-type",
        f"--user-data-dir={desktop.root / 'chromium'}",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--password-store=basic",
        "--disable-features=Translate",
        "--force-device-scale-factor=1",
        "--start-maximized",
        *args,
    )


def test_mousepad_type_then_save_through_the_dialog_in_one_call_each(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    note = tmp_path / "saved note.txt"
    text = "Grêmio — 日本語 ✓ <tag> & 100%\nline two\n"
    shots = Shots()
    with app(local_desktop, "mousepad"):
        wait_for_window(local_desktop, "Mousepad")
        _run(
            local_desktop,
            [
                {"computer_call": {"actions": [{"type": "type", "text": text}]}},
                {"computer_call": {"actions": [{"type": "keypress", "keys": ["CTRL", "S"]}]}},
                {
                    "computer_call": {
                        "actions": [
                            {"type": "keypress", "keys": ["CTRL", "A"]},
                            {"type": "type", "text": str(note)},
                            {"type": "keypress", "keys": ["ENTER"]},
                        ]
                    }
                },
                {"message": "saved"},
            ],
            shots,
        )
    assert note.read_bytes() == text.encode()
    before, typed, dialog, saved = shots.images
    # each screenshot the model received shows its call's effect, not the screen before it
    assert _changed_area(before, typed) > 5000, "the typed text is not in the next screenshot"
    assert _changed_area(typed, dialog) > 100_000, "the Save As dialog is not in the screenshot"
    assert _changed_area(dialog, saved) > 100_000, "the dialog did not close in the screenshot"
    kinds = [(a.kind, a.receipt.changed if a.receipt else None) for a in shots.actions]
    assert kinds == [
        ("type", True),
        ("keypress", True),
        ("keypress", False),  # Ctrl+A: the dialog had already selected the whole name
        ("type", True),
        ("keypress", True),
    ]
    receipts = [a.receipt for a in shots.actions if a.receipt is not None]
    assert receipts[1].focus_after is not None and "Save As" in receipts[1].focus_after.title
    assert receipts[-1].focus_before is not None and "Save As" in receipts[-1].focus_before.title
    assert receipts[-1].focus_after is not None
    assert note.name in receipts[-1].focus_after.title
    assert all(r.settled and r.method == "damage" for r in receipts)


def test_chromium_ctrl_l_url_enter_shows_the_page_in_the_very_next_screenshot(
    local_desktop: LocalDesktop,
) -> None:
    shots = Shots()
    with _web_server() as (base, _), _chromium(local_desktop, "about:blank"):
        wait_for_window(local_desktop, "Chromium")
        _run(
            local_desktop,
            [
                {
                    "computer_call": {
                        "actions": [
                            {"type": "keypress", "keys": ["CTRL", "L"]},
                            {"type": "type", "text": f"{base}/page"},
                            {"type": "keypress", "keys": ["ENTER"]},
                        ]
                    }
                },
                {"message": "loaded"},
            ],
            shots,
        )
    _, after = shots.images
    width, height = after.size
    assert after.getpixel((width // 2, height * 3 // 4)) == BLUE
    last = shots.actions[-1].receipt
    assert last is not None and last.changed and last.focus_after is not None
    assert "Blue page" in last.focus_after.title


def test_a_web_form_click_type_tab_type_enter_submits_in_one_call(
    local_desktop: LocalDesktop,
) -> None:
    shots = Shots()
    with _web_server() as (base, submitted), _chromium(local_desktop, "--kiosk", f"{base}/form"):
        wait_for_window(local_desktop, "Form page")
        _run(
            local_desktop,
            [
                {
                    "computer_call": {
                        "actions": [
                            # kiosk: page pixels are screen pixels; field "a" spans 100..400 x
                            {"type": "click", "button": "left", "x": 250, "y": 120},
                            {"type": "type", "text": "Zoë Ångström"},
                            {"type": "keypress", "keys": ["TAB"]},
                            {"type": "type", "text": "東京 & <b>"},
                            {"type": "keypress", "keys": ["ENTER"]},
                        ]
                    }
                },
                {"message": "submitted"},
            ],
            shots,
        )
    assert submitted == [{"a": ["Zoë Ångström"], "b": ["東京 & <b>"]}]
    before, after = shots.images
    assert before.getpixel((640, 600)) == (255, 255, 255)
    assert after.getpixel((640, 600)) == BLUE, "the page after submitting is not in the screenshot"
    changed = [a.receipt.changed if a.receipt else None for a in shots.actions]
    assert changed == [True, True, True, True, True]


def test_no_change_returns_after_the_expect_window_and_animation_does_not_pin_the_cap(
    local_desktop: LocalDesktop,
) -> None:
    animation = (
        "import tkinter as tk\n"
        "root = tk.Tk(); root.title('Spinner'); root.geometry('200x200+900+500')\n"
        "c = tk.Canvas(root, width=200, height=200); c.pack()\n"
        "r = c.create_rectangle(0, 0, 60, 60, fill='red')\n"
        "def step(i=0):\n"
        "    c.coords(r, i % 140, 70, i % 140 + 60, 130); root.after(40, step, i + 7)\n"
        "step(); root.mainloop()\n"
    )
    shots = Shots()
    with app(local_desktop, "python3", "-c", animation):
        wait_for_window(local_desktop, "Spinner")
        with local_desktop.connect() as client:  # let the agent see the animation run idle
            client.wait(ms=2500)
        _run(
            local_desktop,
            [
                {
                    "computer_call": {
                        "actions": [
                            {"type": "click", "button": "left", "x": 300, "y": 300},
                            {"type": "scroll", "x": 300, "y": 300, "scroll_x": 0, "scroll_y": 200},
                        ]
                    }
                },
                {"message": "done"},
            ],
            shots,
        )
    for action in shots.actions:
        receipt = action.receipt
        assert receipt is not None
        assert not receipt.changed, f"{action.kind}: an inert action reported a change"
        assert receipt.settled and receipt.settle_ms < 1000, (
            f"{action.kind} waited {receipt.settle_ms} ms: the running animation held it"
        )


def test_stall_detection_stops_cubicle_run_with_a_clear_message(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    inert = {"type": "click", "button": "left", "x": 20, "y": 700}
    script = parse_script(
        {
            "name": "stall",
            "turns": [{"computer_call": {"actions": [inert, inert]}} for _ in range(4)]
            + [{"message": "never reached"}],
        }
    )
    with ScriptedModel(script, raise_on_exit=False) as model:
        result = scripted_run(
            local_desktop,
            model,
            prompt="click",
            out=tmp_path / "out",
            safety_policy=ApproveAll(),
            stall_limit=3,
        )
    assert not result.ok
    assert result.stalled is not None and "3 state-changing actions in a row" in result.stalled
    assert result.error is not None and "stalled" in result.error
    events = read_trajectory(tmp_path / "out")
    warnings = [e for e in events if e["kind"] == "warning"]
    assert [w["what"] for w in warnings] == ["stall"]
    actions = [e for e in events if e["kind"] == "action"]
    assert 3 <= len(actions) <= 4, "the run went on after the stall"
    assert all(a["receipt"]["changed"] is False for a in actions)


def test_recorded_receipts_and_stall_limit_zero_never_stalls(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    with TrajectoryRecorder(tmp_path / "out") as recorder:
        session = RecordedSession(recorder, safety_policy=ApproveAll(), stall_limit=0)
        shots = Shots()

        def both(record: ActionRecord) -> None:
            shots(record)
            session.on_action(record)

        with local_desktop.connect() as client, GuestDriver(client, on_action=both) as driver:
            for _ in range(12):
                driver.click(modern.Click(type="click", button="left", x=20, y=700))
            assert driver.last_receipt is shots.actions[-1].receipt
    assert session.stalled is None
    events = read_trajectory(tmp_path / "out")
    receipts = [e["receipt"] for e in events if e["kind"] == "action"]
    assert len(receipts) == 12
    assert set(receipts[0]) >= {"changed", "settled", "settle_ms", "focus_before", "focus_after"}


@pytest.mark.parametrize(
    ("settle", "named"),
    [
        ({"quiet_ms": -1}, "quiet_ms"),
        ({"cap_ms": 10**9}, "cap_ms"),
        ({"expect_ms": 5000, "cap_ms": 1000}, "expect_ms"),
        ({"quiet_ms": 2000, "cap_ms": 1000}, "quiet_ms"),
        ({"quiet": 100}, "quiet"),
        ({"expect_ms": "soon"}, "expect_ms"),
    ],
)
def test_bad_settle_options_are_refused_naming_the_option(
    local_desktop: LocalDesktop, settle: dict[str, Any], named: str
) -> None:
    with local_desktop.connect() as client:
        with pytest.raises(SettleOptionError, match=named):
            GuestDriver(client, settle=settle)
        # the agent refuses the same, names it, and keeps serving
        with pytest.raises(GuestError, match=named) as refused:
            client.click(5, 5, settle=settle)
        assert refused.value.code == "bad_args"
        assert client.info().result["settle_method"] == "damage"
    text = ",".join(f"{k}={v}" for k, v in settle.items())
    with pytest.raises(ConfigError, match=named):
        parse_settle(text)


def test_settle_off_sends_no_receipt(local_desktop: LocalDesktop) -> None:
    shots = Shots()
    with (
        local_desktop.connect() as client,
        GuestDriver(client, on_action=shots, settle=False) as driver,
    ):
        driver.click(modern.Click(type="click", button="left", x=20, y=700))
        assert driver.last_receipt is None
    assert shots.actions[0].receipt is None


def test_the_async_driver_paces_the_same_batch_and_shows_its_effect(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    note = tmp_path / "async note.txt"
    shots = Shots()
    script = parse_script(
        {
            "name": "async-model-speed",
            "turns": [
                {
                    "computer_call": {
                        "actions": [
                            {"type": "type", "text": "async ✓\n"},
                            {"type": "keypress", "keys": ["CTRL", "S"]},
                            {"type": "keypress", "keys": ["CTRL", "A"]},
                            {"type": "type", "text": str(note)},
                            {"type": "keypress", "keys": ["ENTER"]},
                        ]
                    }
                },
                {"message": "saved"},
            ],
        }
    )
    assert local_desktop.agent is not None
    socket_path = local_desktop.agent.socket_path

    async def main() -> None:
        async with (
            await AsyncGuestDriver.connect(socket_path, on_action=shots) as driver,
            openai.AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client,
        ):
            approvals = AsyncApprovals(ApproveAll(geometry=driver))
            await driver.screenshot()
            await AsyncComputerToolset(driver).run(
                client,
                {"model": "scripted", "input": "save"},
                approve_safety_checks=approvals.approve_safety_checks,
                before_action=approvals.before_action,
            )
            receipt = driver.last_receipt
            assert receipt is not None and receipt.focus_after is not None
            assert note.name in receipt.focus_after.title

    with app(local_desktop, "mousepad"):
        wait_for_window(local_desktop, "Mousepad")
        with ScriptedModel(script) as model:
            anyio.run(main)
            model.assert_finished()
    assert note.read_bytes() == "async ✓\n".encode()
    before, after = shots.images
    assert _changed_area(before, after) > VISIBLE_CHANGE_AREA  # the typed line, no dialog left
    assert [a.receipt is not None and a.receipt.settled for a in shots.actions] == [True] * 5
