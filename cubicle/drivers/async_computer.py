"""An ``openai.AsyncComputerDriver`` over a cubicle guest agent (anyio).

The async twin of :class:`cubicle.drivers.computer.GuestDriver`, for ``AsyncComputerToolset`` and
``AsyncResponsesToolRunner``. Validation, coordinate mapping, screenshot checks, timing and
records are the same code (:mod:`cubicle.drivers.steps`, :mod:`cubicle.drivers.actions`,
:mod:`cubicle.drivers.view_state`, :mod:`cubicle.drivers.records`); only the I/O differs:
:class:`cubicle.drivers.async_client.AsyncAgentClient`, every request under
:func:`anyio.fail_after`.

Create one with ``await AsyncGuestDriver.open(client)`` (which sends ``hello`` when needed) or
``await AsyncGuestDriver.connect(path)``. Cancellation: the SDK's ``cancelled`` callable is
checked before sending and while waiting; cancelling the *task* interrupts a request in flight
(the connection is then broken, see :mod:`cubicle.drivers.async_client`).

Ownership: :meth:`connect` makes the driver own its connection (closed by :meth:`aclose`);
:meth:`open` leaves a given client to the caller. Closing never touches the guest.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Self

import anyio
from openai.lib.computer import Screenshot
from openai.types.responses import computer_action as modern
from openai.types.responses import response_computer_tool_call as legacy

from cubicle.drivers.actions import PlannedAction
from cubicle.drivers.async_client import AsyncAgentClient, connect_unix_async
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

__all__ = ["AsyncGuestDriver"]


class AsyncGuestDriver(DriverBase):
    """``openai.AsyncComputerDriver`` executing actions through a guest agent.

    Use :meth:`open` or :meth:`connect`; the parameters are those of
    :class:`cubicle.drivers.computer.GuestDriver`. ``hello`` is the agent's hello reply.
    """

    def __init__(
        self,
        client: AsyncAgentClient,
        hello: dict[str, Any],
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
        if self._settle is not None:
            self._settle = settle_for_agent(self._settle, hello, client.name)
        self._view = ViewState(viewport or Viewport.native(), screen_from_hello(hello, client.name))

    @classmethod
    async def open(cls, client: AsyncAgentClient, **options: Any) -> Self:
        """A driver over ``client`` (sends ``hello`` if needed); the caller owns ``client``."""
        timeout = float(options.get("action_timeout_s", DEFAULT_ACTION_TIMEOUT_S))
        with map_guest_errors("hello"):
            hello = client.hello_result or await client.hello(timeout=timeout)
        return cls(client, hello, **options)

    @classmethod
    async def connect(
        cls, socket_path: str | os.PathLike[str], *, connect_timeout_s: float = 10.0, **options: Any
    ) -> Self:
        """Connect to an agent's unix socket; the driver owns (and closes) the connection."""
        client = await connect_unix_async(socket_path, timeout=connect_timeout_s)
        try:
            return await cls.open(client, owns_client=True, **options)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await client.aclose()
            raise

    async def aclose(self) -> None:
        """Close the connection if this driver owns it. Idempotent."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def click(
        self, action: modern.Click | legacy.ActionClick, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("click", action, cancelled)

    async def double_click(
        self, action: modern.DoubleClick | legacy.ActionDoubleClick, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("double_click", action, cancelled)

    async def drag(
        self, action: modern.Drag | legacy.ActionDrag, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("drag", action, cancelled)

    async def keypress(
        self, action: modern.Keypress | legacy.ActionKeypress, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("keypress", action, cancelled)

    async def move(
        self, action: modern.Move | legacy.ActionMove, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("move", action, cancelled)

    async def scroll(
        self, action: modern.Scroll | legacy.ActionScroll, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("scroll", action, cancelled)

    async def type(
        self, action: modern.Type | legacy.ActionType, *, cancelled: Cancelled = None
    ) -> None:
        await self._act("type", action, cancelled)

    async def wait(
        self, action: modern.Wait | legacy.ActionWait, *, cancelled: Cancelled = None
    ) -> None:
        """Wait ``wait_ms``, checking ``cancelled`` every 20 ms."""
        await self._act("wait", action, cancelled)

    async def screenshot(self, *, cancelled: Cancelled = None) -> Screenshot:
        """Capture the view (the guest crops and downscales) and make its geometry current."""
        step = ScreenshotStep(self._view)
        try:
            step.check(cancelled)
            with map_guest_errors("screenshot"):
                reply = await self._client.call(
                    "screenshot", step.args, timeout=self._screenshot_timeout
                )
            png = step.accept(reply)
        except DriverError as exc:
            self._emit(step.failed(exc))
            raise
        self._emit(step.done(png))
        return screenshot_output(png)

    # -- for provider adapters (cubicle.drivers.claude_toolset) -------------------------------

    async def perform(
        self, kind: str, planner: Planner, *, cancelled: Cancelled = None, extra_s: float = 0.0
    ) -> None:
        """See :meth:`GuestDriver.perform <cubicle.drivers.computer.GuestDriver.perform>`."""
        step = ActionStep(kind, self._view)
        try:
            plan = step.prepare_plan(planner, cancelled, self._settle)
            await self._send(step, plan, cancelled, extra_s)
        except DriverError as exc:
            self._emit(step.record(exc))
            raise
        self._emit(step.record(None))

    async def pointer(self) -> tuple[int, int]:
        """Where the pointer is, native screen pixels."""
        with map_guest_errors("pointer"):
            reply = await self._client.call("pointer", {}, timeout=self._action_timeout)
        return pointer_of(reply)

    async def capture(self, region: Rect) -> bytes:
        """A PNG of native ``region`` at native resolution."""
        with map_guest_errors("screenshot"):
            reply = await self._client.screenshot(
                format="png", region=region.as_region(), timeout=self._screenshot_timeout
            )
        return region_png(reply, region)

    async def release_all(self) -> list[str]:
        """Release every key and button still held in the guest; names what was."""
        with map_guest_errors("release_all"):
            reply = await self._client.release_all(timeout=self._action_timeout)
        return [str(name) for name in reply.result.get("released") or []]

    # -- internals -------------------------------------------------------------------------

    async def _act(self, kind: str, action: object, cancelled: Cancelled) -> None:
        step = ActionStep(kind, self._view)
        try:
            plan = step.prepare(action, cancelled, self._settle)
            await self._send(step, plan, cancelled, 0.0)
        except DriverError as exc:
            self._emit(step.record(exc))
            raise
        self._emit(step.record(None))

    async def _send(
        self, step: ActionStep, plan: PlannedAction, cancelled: Cancelled, extra_s: float
    ) -> None:
        if plan.op is None:
            await self._wait(cancelled, plan.args.get("ms", self._wait_ms))
            return
        with map_guest_errors(step.kind):
            reply = await self._client.call(
                plan.op, plan.args, timeout=step.timeout_s(self._action_timeout) + extra_s
            )
        step.accept(reply)

    async def _wait(self, cancelled: Cancelled, ms: int) -> None:
        for pause in wait_pauses(ms, cancelled):
            await anyio.sleep(pause)
