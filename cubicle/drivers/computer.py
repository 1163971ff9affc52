"""A blocking ``openai.ComputerDriver`` over a cubicle guest agent.

Drop it into the SDK unchanged::

    driver = GuestDriver(sandbox.connect(), viewport=Viewport.fit(1280, 800), owns_client=True)
    ComputerToolset(driver).run(client, params, approve_safety_checks=..., before_action=...)

(:meth:`GuestDriver.connect` takes a host socket path, for an agent that has one: a VM's channel,
an agent run by hand.)

Every action is validated completely and mapped from model pixels to screen pixels
(:mod:`cubicle.drivers.viewport`) *before* anything is sent; a coordinate outside the last
screenshot is rejected with :class:`~cubicle.drivers.errors.CoordinateOutOfView`. Every guest
request has a deadline.

Cancellation is cooperative: each method takes the SDK's ``cancelled`` callable, checks it before
sending, and ``wait`` polls it while waiting. A request already sent runs to completion (bounded
by its timeout); the agent performs a drag's whole path as one request, so a drag is stopped
before it starts, not between its points.

Ownership: a driver built with :meth:`GuestDriver.connect` owns its connection and closes it in
:meth:`close`; a driver given an :class:`AgentClient` leaves closing it to the caller. Closing
never touches the guest.
"""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import Any, Self

from openai.lib.computer import Screenshot
from openai.types.responses import computer_action as modern
from openai.types.responses import response_computer_tool_call as legacy

from cubicle.drivers.actions import PlannedAction
from cubicle.drivers.errors import DriverError
from cubicle.drivers.guest_errors import map_guest_errors
from cubicle.drivers.options import (
    DEFAULT_ACTION_TIMEOUT_S,
    DEFAULT_SCREENSHOT_TIMEOUT_S,
    DEFAULT_WAIT_MS,
    Cancelled,
    check_wait_ms,
)
from cubicle.drivers.records import ActionObserver
from cubicle.drivers.settle import SettleOption, check_settle, settle_for_agent
from cubicle.drivers.steps import ActionStep, DriverBase, Planner, ScreenshotStep, wait_pauses
from cubicle.drivers.view_state import (
    ViewState,
    pointer_of,
    region_png,
    screen_from_hello,
    screenshot_output,
)
from cubicle.drivers.viewport import Rect, Viewport
from cubicle_guest.client import AgentClient, connect_unix

__all__ = ["GuestDriver"]


class GuestDriver(DriverBase):
    """``openai.ComputerDriver`` executing actions through a guest agent.

    :param client: a connected agent client (``hello`` is sent if it has not been yet).
    :param viewport: what the model sees (default: the whole screen at native size).
    :param action_timeout_s: deadline of each action request, seconds.
    :param screenshot_timeout_s: deadline of each screenshot request, seconds.
    :param wait_ms: duration of the ``wait`` action, milliseconds (0..60000).
    :param on_action: observer called after every action and screenshot
    (:mod:`cubicle.drivers.records`).
    :param settle: how each input action waits for its effect before returning
        (:mod:`cubicle.drivers.settle`; default on, ``False`` turns it off). Its ``cap_ms`` is
        added to each action's deadline ``action_timeout_s``.
    :param owns_client: close ``client`` in :meth:`close`.
    """

    def __init__(
        self,
        client: AgentClient,
        *,
        viewport: Viewport | None = None,
        action_timeout_s: float = DEFAULT_ACTION_TIMEOUT_S,
        screenshot_timeout_s: float = DEFAULT_SCREENSHOT_TIMEOUT_S,
        wait_ms: int = DEFAULT_WAIT_MS,
        on_action: ActionObserver | None = None,
        settle: SettleOption = True,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._owns_client = owns_client
        self._action_timeout = action_timeout_s
        self._screenshot_timeout = screenshot_timeout_s
        self._wait_ms = check_wait_ms(wait_ms)
        self._settle = check_settle(settle)
        self.on_action = on_action
        with map_guest_errors("hello"):
            hello = client.hello_result or client.hello(timeout=action_timeout_s)
        if self._settle is not None:
            self._settle = settle_for_agent(self._settle, hello, client.name)
        self._view = ViewState(viewport or Viewport.native(), screen_from_hello(hello, client.name))

    @classmethod
    def connect(
        cls, socket_path: str | os.PathLike[str], *, connect_timeout_s: float = 10.0, **options: Any
    ) -> Self:
        """Connect to an agent's unix socket; the driver owns (and closes) the connection."""
        client = connect_unix(socket_path, timeout=connect_timeout_s)
        try:
            return cls(client, owns_client=True, **options)
        except BaseException:
            client.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection if this driver owns it. Idempotent."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # geometry, screen and to_native (for policies and recorders) come from DriverBase.

    # -- the nine ComputerDriver methods -----------------------------------------------------

    def click(
        self, action: modern.Click | legacy.ActionClick, *, cancelled: Cancelled = None
    ) -> None:
        self._act("click", action, cancelled)

    def double_click(
        self, action: modern.DoubleClick | legacy.ActionDoubleClick, *, cancelled: Cancelled = None
    ) -> None:
        self._act("double_click", action, cancelled)

    def drag(self, action: modern.Drag | legacy.ActionDrag, *, cancelled: Cancelled = None) -> None:
        self._act("drag", action, cancelled)

    def keypress(
        self, action: modern.Keypress | legacy.ActionKeypress, *, cancelled: Cancelled = None
    ) -> None:
        self._act("keypress", action, cancelled)

    def move(self, action: modern.Move | legacy.ActionMove, *, cancelled: Cancelled = None) -> None:
        self._act("move", action, cancelled)

    def scroll(
        self, action: modern.Scroll | legacy.ActionScroll, *, cancelled: Cancelled = None
    ) -> None:
        self._act("scroll", action, cancelled)

    def type(self, action: modern.Type | legacy.ActionType, *, cancelled: Cancelled = None) -> None:
        self._act("type", action, cancelled)

    def wait(self, action: modern.Wait | legacy.ActionWait, *, cancelled: Cancelled = None) -> None:
        """Wait ``wait_ms`` on the host, checking ``cancelled`` every 20 ms."""
        self._act("wait", action, cancelled)

    def screenshot(self, *, cancelled: Cancelled = None) -> Screenshot:
        """Capture the view (the guest crops and downscales) and make its geometry current."""
        step = ScreenshotStep(self._view)
        try:
            step.check(cancelled)
            with map_guest_errors("screenshot"):
                reply = self._client.screenshot(**step.args, timeout=self._screenshot_timeout)
            png = step.accept(reply)
        except DriverError as exc:
            self._emit(step.failed(exc))
            raise
        self._emit(step.done(png))
        return screenshot_output(png)

    # -- for provider adapters (cubicle.drivers.claude_toolset, gemini_actions) ---------------

    def perform(
        self, kind: str, planner: Planner, *, cancelled: Cancelled = None, extra_s: float = 0.0
    ) -> None:
        """Run one provider call planned by ``planner`` (validated and mapped with the current
        geometry, :mod:`cubicle.drivers.claude_plans`) with the same settle, receipt and record
        as the nine methods. A plan without an op waits ``args["ms"]`` on the host.
        ``extra_s`` lengthens the request's deadline (a held chord's time)."""
        step = ActionStep(kind, self._view)
        try:
            plan = step.prepare_plan(planner, cancelled, self._settle)
            self._send(step, plan, cancelled, extra_s)
        except DriverError as exc:
            self._emit(step.record(exc))
            raise
        self._emit(step.record(None))

    def pointer(self) -> tuple[int, int]:
        """Where the pointer is, native screen pixels (agent op ``pointer``)."""
        with map_guest_errors("pointer"):
            reply = self._client.call("pointer", {}, timeout=self._action_timeout)
        return pointer_of(reply)

    def capture(self, region: Rect) -> bytes:
        """A PNG of native ``region`` at native resolution (no scaling; not a view screenshot)."""
        with map_guest_errors("screenshot"):
            reply = self._client.screenshot(
                format="png", region=region.as_region(), timeout=self._screenshot_timeout
            )
        return region_png(reply, region)

    def release_all(self) -> list[str]:
        """Release every key and button still held in the guest; names what was."""
        with map_guest_errors("release_all"):
            reply = self._client.release_all(timeout=self._action_timeout)
        return [str(name) for name in reply.result.get("released") or []]

    # -- internals -------------------------------------------------------------------------

    def _act(self, kind: str, action: object, cancelled: Cancelled) -> None:
        step = ActionStep(kind, self._view)
        try:
            plan = step.prepare(action, cancelled, self._settle)
            self._send(step, plan, cancelled, 0.0)
        except DriverError as exc:
            self._emit(step.record(exc))
            raise
        self._emit(step.record(None))

    def _send(
        self, step: ActionStep, plan: PlannedAction, cancelled: Cancelled, extra_s: float
    ) -> None:
        if plan.op is None:
            self._wait(cancelled, plan.args.get("ms", self._wait_ms))
            return
        with map_guest_errors(step.kind):
            reply = self._client.call(
                plan.op, plan.args, timeout=step.timeout_s(self._action_timeout) + extra_s
            )
        step.accept(reply)

    def _wait(self, cancelled: Cancelled, ms: int) -> None:
        for pause in wait_pauses(ms, cancelled):
            time.sleep(pause)
