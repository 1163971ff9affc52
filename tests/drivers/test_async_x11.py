"""The async driver end to end: the real ``AsyncComputerToolset`` against the scripted model,
an anyio connection to a real agent on Xvfb, effects checked in a recorder window."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import openai
import pytest
from openai import AsyncComputerDriver, AsyncComputerToolset
from openai.lib.computer import ComputerUseError
from openai.types.responses import computer_action as modern
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from cubicle.drivers.approvals import ApproveAll, AsyncApprovals, NonInteractive
from cubicle.drivers.async_client import connect_unix_async
from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.errors import ActionCancelled, CoordinateOutOfView
from cubicle.drivers.scripted_model import ScriptedModel
from cubicle.drivers.viewport import Viewport
from tests.drivers.conftest import DesktopFactory, one_call_script

pytestmark = pytest.mark.x11

PARAMS: ResponseCreateParamsNonStreaming = {"model": "drill", "input": "do the drill"}


async def run_async(
    driver: AsyncGuestDriver, model: ScriptedModel, approvals: AsyncApprovals, **kw: Any
) -> Any:
    async with openai.AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0) as client:
        return await AsyncComputerToolset(driver).run(
            client,
            PARAMS,
            approve_safety_checks=approvals.approve_safety_checks,
            before_action=approvals.before_action,
            **kw,
        )


def test_async_toolset_maps_clicks_and_drags(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1920, 1080)
    script = one_call_script(
        [
            {"type": "click", "button": "left", "x": 640, "y": 360},
            {"type": "drag", "path": [{"x": 2, "y": 2}, {"x": 100, "y": 100}]},
        ],
        checks=[{"id": "sc_1", "code": "malicious_instructions", "message": "m"}],
        view=(1280, 720),
    )

    async def main() -> Any:
        async with await AsyncGuestDriver.connect(
            agent_desktop.agent.socket_path, viewport=Viewport.fit(1280, 800)
        ) as driver:
            conforming: AsyncComputerDriver = driver  # mypy --strict checks the conformance
            approvals = AsyncApprovals(ApproveAll(geometry=driver))
            with ScriptedModel(script) as model:
                response = await run_async(driver, model, approvals)
                acknowledged = model.requests[1]["input"][-1]["acknowledged_safety_checks"]
            return conforming, response, acknowledged, approvals.log

    _, response, acknowledged, log = anyio.run(main)
    assert response.output_text == "done"
    assert [a["id"] for a in acknowledged] == ["sc_1"]
    assert [d.native_points for d in log if d.action == "drag"] == [((3, 3), (150, 150))]
    events = recorder.wait_until(
        lambda evs: sum(e.kind == "ButtonRelease" and e.button == 1 for e in evs) == 2,
        what="the click and the drag",
    )
    presses = [(e.root_x, e.root_y) for e in events if e.kind == "ButtonPress"]
    releases = [(e.root_x, e.root_y) for e in events if e.kind == "ButtonRelease"]
    assert presses == [(960, 540), (3, 3)]
    assert releases == [(960, 540), (150, 150)]


def test_async_refusals_and_bounds_stop_before_any_effect(desktop: DesktopFactory) -> None:
    agent_desktop, recorder = desktop(1280, 800)
    checked = one_call_script(
        [{"type": "click", "button": "left", "x": 5, "y": 5}],
        checks=[{"id": "sc_9", "code": "sensitive_domain", "message": "m"}],
    )
    outside = one_call_script([{"type": "click", "button": "left", "x": 1280, "y": 5}])

    async def main() -> None:
        async with await AsyncGuestDriver.connect(agent_desktop.agent.socket_path) as driver:
            with (
                ScriptedModel(checked) as model,
                pytest.raises(ComputerUseError, match="require explicit approval"),
            ):
                await run_async(driver, model, AsyncApprovals(NonInteractive()))
            with (
                ScriptedModel(outside, raise_on_exit=False) as model,
                pytest.raises(CoordinateOutOfView),
            ):
                await run_async(driver, model, AsyncApprovals(ApproveAll()))
            await driver.click(modern.Click(type="click", button="right", x=7, y=7))  # marker

    anyio.run(main)
    marker = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (marker.button, marker.root_x, marker.root_y) == (3, 7, 7)
    assert [e.kind for e in recorder.events if e.kind == "ButtonPress"] == ["ButtonPress"]


def test_async_wait_is_interruptible_and_client_is_shareable(desktop: DesktopFactory) -> None:
    agent_desktop, _ = desktop(640, 480)
    stop = threading.Event()

    async def main() -> tuple[int, int]:
        async with await connect_unix_async(agent_desktop.agent.socket_path) as client:
            driver = await AsyncGuestDriver.open(client, wait_ms=60_000)
            other = await AsyncGuestDriver.open(client, viewport=Viewport.fit(320, 240))
            timer = threading.Timer(0.2, stop.set)
            timer.start()
            try:
                with pytest.raises(ActionCancelled):
                    await driver.wait(modern.Wait(type="wait"), cancelled=stop.is_set)
            finally:
                timer.cancel()
            shot = await other.screenshot()
            assert shot["image_url"].startswith("data:image/png;base64,")
            return other.geometry.width, driver.geometry.width

    # two drivers with different views share one connection and keep their own geometry
    assert anyio.run(main) == (320, 640)
