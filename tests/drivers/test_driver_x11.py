"""The sync driver end to end: the real ``ComputerToolset`` / ``ResponsesToolRunner`` against the
scripted model, the driver connected to a real agent on Xvfb, effects checked in a recorder
window (what the X server delivered, at which screen pixel)."""

from __future__ import annotations

import io
import os
import threading
from typing import Any

import openai
import pytest
from openai import ComputerDriver, ComputerToolset
from openai.lib.computer import ComputerUseError
from openai.lib.responses_tool_runner import ResponsesToolRunner
from openai.types.responses import computer_action as modern
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from PIL import Image

from cubicle.drivers.approvals import ApproveAll, FilePolicy, NonInteractive, TerminalPrompt
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import ActionCancelled, ActionFailed, CoordinateOutOfView
from cubicle.drivers.policy_file import parse_policy
from cubicle.drivers.records import ActionRecord
from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.drivers.viewport import Rect, Viewport
from tests.drivers.conftest import Desktop, DesktopFactory, one_call_script
from tests.support.recorder import RecordedEvent, Recorder

pytestmark = pytest.mark.x11

PARAMS: ResponseCreateParamsNonStreaming = {"model": "drill", "input": "do the drill"}


def connect(desktop: Desktop, viewport: Viewport, **options: Any) -> GuestDriver:
    return GuestDriver.connect(desktop.agent.socket_path, viewport=viewport, **options)


def run_toolset(driver: GuestDriver, model: ScriptedModel, **callbacks: Any) -> Any:
    with openai.OpenAI(base_url=model.base_url, api_key="drill", max_retries=0) as client:
        return ComputerToolset(driver).run(client, PARAMS, **callbacks)


def approve_all(driver: GuestDriver) -> dict[str, Any]:
    policy = ApproveAll(geometry=driver)
    return {
        "approve_safety_checks": policy.approve_safety_checks,
        "before_action": policy.before_action,
    }


def presses_until_marker(desktop: Desktop, recorder: Recorder) -> list[RecordedEvent]:
    """Send a marker (right click at 7,7) *after* whatever the test did, wait for it, and return
    every ButtonPress the window got — the agent executes requests in order, so anything the
    run caused was delivered before the marker."""
    with desktop.agent.client() as client:
        client.click(7, 7, button="right")
    recorder.wait_for(
        lambda e: e.kind == "ButtonPress" and e.button == 3 and (e.root_x, e.root_y) == (7, 7),
        what="marker click",
    )
    return [e for e in recorder.events if e.kind == "ButtonPress"]


def is_marker(event: RecordedEvent) -> bool:
    return event.button == 3 and (event.root_x, event.root_y) == (7, 7)


@pytest.mark.parametrize(
    ("screen", "viewport", "view", "model_point", "screen_point"),
    [
        ((1920, 1080), Viewport.fit(1280, 800), (1280, 720), (640, 360), (960, 540)),
        ((1600, 1200), Viewport.fit(800, 600), (800, 600), (123, 456), (246, 912)),
        (
            (1600, 1200),
            Viewport.fit(400, 300, crop=Rect(200, 100, 800, 600)),
            (400, 300),
            (10, 20),
            (220, 140),
        ),
        ((1600, 1200), Viewport.exact(800, 300), (800, 300), (400, 150), (800, 600)),
        ((1280, 800), Viewport.native(), (1280, 800), (1279, 799), (1279, 799)),
    ],
    ids=[
        "1920x1080-fit-1280x720",
        "1600x1200-at-800x600-doubles",
        "crop-adds-offset",
        "exact-other-aspect",
        "native",
    ],
)
def test_click_lands_on_the_mapped_screen_pixel(
    desktop: DesktopFactory,
    screen: tuple[int, int],
    viewport: Viewport,
    view: tuple[int, int],
    model_point: tuple[int, int],
    screen_point: tuple[int, int],
) -> None:
    agent_desktop, recorder = desktop(*screen)
    x, y = model_point
    script = one_call_script([{"type": "click", "button": "left", "x": x, "y": y}], view=view)
    with connect(agent_desktop, viewport) as driver, ScriptedModel(script) as model:
        driver.screenshot()  # the model "saw" a screenshot of this view before acting
        response = run_toolset(driver, model, **approve_all(driver))
        model.assert_finished()  # includes: the screenshot sent back was view-sized
    assert response.output_text == "done"
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress" and e.button == 1)
    release = recorder.wait_for(lambda e: e.kind == "ButtonRelease" and e.button == 1)
    assert (press.root_x, press.root_y) == screen_point
    assert (release.root_x, release.root_y) == screen_point


def test_coordinates_before_any_screenshot_use_the_hello_geometry(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1600, 1200)
    with connect(agent_desktop, Viewport.fit(800, 600)) as driver:
        assert (driver.geometry.width, driver.geometry.height) == (800, 600)
        driver.click(modern.Click(type="click", button="left", x=100, y=100))
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (press.root_x, press.root_y) == (200, 200)


def test_every_drag_point_and_the_scroll_point_are_mapped(desktop: DesktopFactory) -> None:
    """Through ResponsesToolRunner (plain): 800x600 view of 1600x1200 doubles every point."""
    agent_desktop, recorder = desktop(1600, 1200)
    path = [{"x": 10, "y": 10}, {"x": 100, "y": 50}, {"x": 200, "y": 300}]
    script = one_call_script(
        [
            {"type": "drag", "path": path},
            {"type": "scroll", "x": 300, "y": 200, "scroll_x": 0, "scroll_y": 150},
        ],
        view=(800, 600),
    )
    with connect(agent_desktop, Viewport.fit(800, 600)) as driver, ScriptedModel(script) as model:
        policy = ApproveAll(geometry=driver)
        with openai.OpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client:
            response = ResponsesToolRunner(computer=ComputerToolset(driver)).run(
                client,
                PARAMS,
                approve_safety_checks=policy.approve_safety_checks,
                before_action=policy.before_action,
            )
    assert response.output_text == "done"
    events = recorder.wait_until(
        lambda evs: sum(e.kind == "ButtonRelease" and e.button == 5 for e in evs) == 3,
        what="three wheel-down clicks (150 model px = 300 screen px)",
    )
    press = next(e for e in events if e.kind == "ButtonPress" and e.button == 1)
    release = next(e for e in events if e.kind == "ButtonRelease" and e.button == 1)
    assert (press.root_x, press.root_y) == (20, 20)
    assert (release.root_x, release.root_y) == (400, 600)
    during = events[events.index(press) : events.index(release)]
    assert any((e.root_x, e.root_y) == (200, 100) for e in during if e.kind == "MotionNotify")
    wheel = [e for e in events if e.kind == "ButtonPress" and e.button == 5]
    assert {(e.root_x, e.root_y) for e in wheel} == {(600, 400)}


def test_an_out_of_image_click_is_refused_before_any_effect(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1920, 1080)
    records: list[ActionRecord] = []
    script = one_call_script([{"type": "click", "button": "left", "x": 1280, "y": 10}])
    model = ScriptedModel(script, raise_on_exit=False)
    with (
        connect(agent_desktop, Viewport.fit(1280, 800), on_action=records.append) as driver,
        model,
        pytest.raises(CoordinateOutOfView, match=r"\(1280, 10\) is outside the 1280x720"),
    ):
        run_toolset(driver, model, **approve_all(driver))
    assert [is_marker(e) for e in presses_until_marker(agent_desktop, recorder)] == [True]
    assert [(r.kind, r.outcome, r.native_points) for r in records] == [("click", "rejected", ())]


def test_an_approved_safety_check_is_acknowledged_in_the_next_request(
    desktop: DesktopFactory,
) -> None:
    """Through ResponsesToolRunner(stream=True), with a human answering 'y' on a real pipe."""
    agent_desktop, recorder = desktop(1280, 800)
    check = {"id": "sc_1", "code": "malicious_instructions", "message": "Drill: confirm."}
    script = one_call_script(
        [{"type": "click", "button": "left", "x": 5, "y": 6}], checks=[check], view=(1280, 800)
    )
    read_fd, write_fd = os.pipe()
    with (
        open(read_fd, encoding="utf-8") as answers,
        open(write_fd, "w", encoding="utf-8") as human,
        connect(agent_desktop, Viewport.native()) as driver,
        ScriptedModel(script) as model,
        openai.OpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client,
    ):
        shown = io.StringIO()
        prompt = TerminalPrompt(answers, shown, geometry=driver)
        human.write("y\n")
        human.flush()
        response = ResponsesToolRunner(computer=ComputerToolset(driver)).run(
            client, PARAMS, approve_safety_checks=prompt.approve_safety_checks, stream=True
        )
    assert response.output_text == "done"
    assert "[malicious_instructions] Drill: confirm." in shown.getvalue()
    output = model.requests[1]["input"][-1]
    assert output["type"] == "computer_call_output"
    assert output["acknowledged_safety_checks"] == [check]
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (press.root_x, press.root_y) == (5, 6)
    assert [d.approved for d in prompt.log] == [True]


def test_a_refused_safety_check_stops_the_run_with_no_action(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1280, 800)
    check = {"id": "sc_1", "code": "malicious_instructions", "message": "m"}
    script = one_call_script([{"type": "click", "button": "left", "x": 5, "y": 6}], checks=[check])
    policy = NonInteractive()
    with connect(agent_desktop, Viewport.native()) as driver, ScriptedModel(script) as model:
        with pytest.raises(ComputerUseError, match="safety checks require explicit approval"):
            run_toolset(driver, model, approve_safety_checks=policy.approve_safety_checks)
        assert len(model.requests) == 1
    assert [is_marker(e) for e in presses_until_marker(agent_desktop, recorder)] == [True]
    assert [(d.subject, d.approved, d.decided_by) for d in policy.log] == [
        ("safety_checks", False, "non-interactive")
    ]


def test_a_before_action_refusal_stops_with_no_effect(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1280, 800)
    policy_file = parse_policy(
        'default = "allow"\n[[rule]]\ndecision = "deny"\nactions = ["click"]\n'
        "region = {x = 0, y = 0, width = 100, height = 100}\n",
        "deny-corner.toml",
    )
    script = one_call_script(
        [{"type": "type", "text": "ok"}, {"type": "click", "button": "left", "x": 50, "y": 50}]
    )
    with connect(agent_desktop, Viewport.native()) as driver, ScriptedModel(script) as model:
        policy = FilePolicy(policy_file, geometry=driver)
        with pytest.raises(ComputerUseError, match="Computer action was not approved"):
            run_toolset(driver, model, before_action=policy.before_action)
    assert [is_marker(e) for e in presses_until_marker(agent_desktop, recorder)] == [True]
    assert recorder.text() == "ok"  # the approved action before it did run
    assert [(d.action, d.approved, d.decided_by) for d in policy.log] == [
        ("type", True, "policy deny-corner.toml default"),
        ("click", False, "policy deny-corner.toml rule 1 (line 2)"),
    ]


def test_cancelled_stops_between_actions(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1280, 800)
    stop = threading.Event()

    def observe(record: ActionRecord) -> None:
        if record.kind == "click":
            stop.set()  # the user presses "stop" while the first action runs

    script = one_call_script(
        [
            {"type": "click", "button": "left", "x": 30, "y": 40},
            {"type": "type", "text": "never"},
            {"type": "click", "button": "left", "x": 90, "y": 90},
        ]
    )
    model = ScriptedModel(script, raise_on_exit=False)
    with (
        connect(agent_desktop, Viewport.native(), on_action=observe) as driver,
        model,
        pytest.raises(ComputerUseError, match="Computer run was cancelled"),
    ):
        run_toolset(driver, model, cancelled=stop.is_set)
    presses = presses_until_marker(agent_desktop, recorder)
    assert [(e.root_x, e.root_y) for e in presses] == [(30, 40), (7, 7)]
    assert recorder.key_events() == []


def test_wait_is_bounded_and_interruptible_by_cancelled(desktop: DesktopFactory) -> None:
    agent_desktop, _ = desktop(640, 480)
    stop = threading.Event()
    with connect(agent_desktop, Viewport.native(), wait_ms=60_000) as driver:
        timer = threading.Timer(0.2, stop.set)
        timer.start()
        try:
            with pytest.raises(ActionCancelled, match="wait stopped: the run was cancelled"):
                driver.wait(modern.Wait(type="wait"), cancelled=stop.is_set)
        finally:
            timer.cancel()


def test_close_while_a_run_is_active_reports_draining(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1280, 800)
    statuses: list[Any] = []
    script = one_call_script([{"type": "click", "button": "left", "x": 11, "y": 12}])
    with connect(agent_desktop, Viewport.native()) as driver, ScriptedModel(script) as model:
        toolset = ComputerToolset(driver)
        driver.on_action = lambda record: statuses.append(toolset.close())
        with openai.OpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client:
            response = toolset.run(client, PARAMS)  # the active run still finishes
            assert response.output_text == "done"
            with pytest.raises(RuntimeError, match="Computer toolset is closed"):
                toolset.run(client, PARAMS)
    assert statuses[0] == {"status": "draining"}
    assert recorder.wait_for(lambda e: e.kind == "ButtonPress").root_x == 11


def test_records_carry_model_and_screen_coordinates_and_screenshots(
    desktop: DesktopFactory,
) -> None:
    agent_desktop, _ = desktop(1600, 1200)
    records: list[ActionRecord] = []
    script = one_call_script(
        [{"type": "double_click", "x": 400, "y": 300}, {"type": "keypress", "keys": ["ctrl", "a"]}],
        view=(800, 600),
    )
    with (
        connect(agent_desktop, Viewport.fit(800, 600), on_action=records.append) as driver,
        ScriptedModel(script) as model,
    ):
        run_toolset(driver, model, **approve_all(driver))
    kinds = [(r.kind, r.outcome, r.model_points, r.native_points) for r in records]
    assert kinds == [
        ("double_click", "done", ((400, 300),), ((800, 600),)),
        ("keypress", "done", (), ()),
        ("screenshot", "done", (), ()),
    ]
    shot = records[-1]
    assert shot.image is not None
    with Image.open(io.BytesIO(shot.image)) as image:
        assert image.size == (800, 600)
    assert shot.geometry.describe().startswith("800x600 view of 1600x1200+0+0")
    assert records[1].details == {"keys": 2}  # content-free


def test_a_legacy_computer_use_preview_call_works(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1280, 800)
    script = parse_script(
        {
            "name": "legacy",
            "turns": [
                {
                    "computer_call": {
                        "action": {"type": "click", "button": "left", "x": 77, "y": 66}
                    }
                },
                {"message": "done"},
            ],
        }
    )
    params: ResponseCreateParamsNonStreaming = {
        **PARAMS,
        "tools": [
            {
                "type": "computer_use_preview",
                "display_width": 1280,
                "display_height": 800,
                "environment": "linux",
            }
        ],
    }
    with (
        connect(agent_desktop, Viewport.native()) as driver,
        ScriptedModel(script) as model,
        openai.OpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client,
    ):
        ComputerToolset(driver).run(client, params)
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (press.root_x, press.root_y) == (77, 66)


def test_a_failed_guest_request_names_the_action(desktop: DesktopFactory) -> None:
    agent_desktop, _ = desktop(640, 480)
    driver = connect(agent_desktop, Viewport.native())
    driver.close()
    with pytest.raises(ActionFailed, match=r"^click failed: connection to .* is closed"):
        driver.click(modern.Click(type="click", button="left", x=1, y=1))


def test_the_driver_conforms_to_the_sdk_protocol(desktop: DesktopFactory) -> None:
    agent_desktop, _ = desktop(640, 480)
    with connect(agent_desktop, Viewport.native()) as concrete:
        driver: ComputerDriver = concrete  # mypy --strict checks the conformance
        ComputerToolset(driver)  # the SDK accepts all nine members, of the sync flavour
        assert driver.screenshot()["image_url"].startswith("data:image/png;base64,")
