"""Claude's ``computer_toolset_20260801`` over a cubicle guest: a thin adapter on the same drivers.

:class:`ClaudeToolset` subclasses the ``anthropic`` SDK's ``BetaAbstractComputerToolset20260801``
(:class:`AsyncClaudeToolset` its async twin) and serves all seventeen members through a
:class:`~cubicle.drivers.computer.GuestDriver` (an
:class:`~cubicle.drivers.async_computer.AsyncGuestDriver`)::

    driver = GuestDriver(sandbox.connect(), viewport=Viewport.fit(1280, 800), owns_client=True)
    with ClaudeToolset(driver, confirm=policy, owns_driver=True) as toolset:
        runner = client.beta.messages.tool_runner(model=..., tools=[toolset], messages=...)
        for message in claude_turns(runner, toolset):
            ...

Contracts (the same as the OpenAI path's, :mod:`cubicle.drivers.computer`):

* coordinates are pixels of the last screenshot, mapped to the screen with the driver's geometry,
  refused outside the image (never clamped); ``cursor_position`` answers in screenshot pixels;
* every input member is validated completely before anything is sent
  (:mod:`cubicle.drivers.claude_plans`), settles and carries a receipt, and is recorded through the
  driver's ``on_action`` observer under the member's name; a refusal names the member and field;
* keys are xdotool-style (:mod:`cubicle.drivers.claude_keys`); an unknown key is refused by name;
  ``type`` types any Unicode text;
* ``hold_key`` holds its chord inside one agent request, released before the call returns (also
  when it fails); ``left_mouse_down`` leaves the left button pressed until ``left_mouse_up``, or
  until :meth:`end_turn` (:func:`claude_turns` calls it after each turn), an error or cancellation
  of any member, :meth:`close`, or the end of the ``with`` block;
* ``zoom`` maps its region to screen pixels, captures it at native resolution and scales it (up or
  down, keeping its aspect ratio) to fit the size of the screenshots the model is shown: detail the
  scaled screenshot lacks, never a crop of it;
* ``screenshot`` and ``zoom`` return PNG at most the viewport's size: choose a viewport within the
  model's image limits (``Viewport.fit(1280, 800)`` is).

``confirm`` is the SDK's: required while ``type``, ``key`` or ``hold_key`` is enabled.
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

import anyio
from anthropic.lib.tools._toolsets._computer_inputs import (
    BetaComputerCursorPositionInput,
    BetaComputerLeftMouseDownInput,
    BetaComputerLeftMouseUpInput,
    BetaComputerMemberInput,
    BetaComputerMemberName,
    BetaComputerScreenshotInput,
)
from anthropic.tools import (
    BetaAbstractComputerToolset20260801,
    BetaAsyncAbstractComputerToolset20260801,
    BetaAsyncComputerConfirmCallable,
    BetaComputerConfirmCallable,
    BetaComputerCursorPositionResult,
    BetaComputerMemberResult,
    BetaScreenshotResult,
    BetaToolsetCallContext,
)
from anthropic.types.beta import (
    BetaComputerDoubleClickInput,
    BetaComputerHoldKeyInput,
    BetaComputerKeyInput,
    BetaComputerLeftClickDragInput,
    BetaComputerLeftClickInput,
    BetaComputerMiddleClickInput,
    BetaComputerMouseMoveInput,
    BetaComputerRightClickInput,
    BetaComputerScrollInput,
    BetaComputerToolsetConfigsParam,
    BetaComputerTripleClickInput,
    BetaComputerTypeInput,
    BetaComputerWaitInput,
    BetaComputerZoomInput,
)
from PIL import Image

from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.claude_keys import parse_key_text
from cubicle.drivers.claude_plans import (
    MAX_HOLD_S,
    MAX_REPEAT,
    MAX_WAIT_S,
    check_seconds,
    click_plan,
    drag_plan,
    hold_plan,
    keypress_plan,
    mouse_button_plan,
    move_plan,
    scroll_plan,
    type_plan,
    wait_plan,
)
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import ActionFailed, ActionRejected
from cubicle.drivers.options import Cancelled
from cubicle.drivers.viewport import Point, ViewGeometry

__all__ = ["AsyncClaudeToolset", "ClaudeToolset", "aclaude_turns", "claude_turns", "zoom_image"]

_T = TypeVar("_T")
_PNG_PREFIX = "data:image/png;base64,"

ClickInput = (
    BetaComputerLeftClickInput
    | BetaComputerRightClickInput
    | BetaComputerMiddleClickInput
    | BetaComputerDoubleClickInput
    | BetaComputerTripleClickInput
)


def zoom_image(png: bytes, box: tuple[int, int]) -> bytes:
    """``png`` scaled (up or down, aspect kept, Lanczos) to the largest size within ``box``."""
    with Image.open(io.BytesIO(png)) as image:
        width, height = image.size
        scale = min(box[0] / width, box[1] / height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        size = (min(size[0], box[0]), min(size[1], box[1]))
        scaled = image.resize(size, Image.Resampling.LANCZOS) if size != image.size else image
        out = io.BytesIO()
        scaled.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _png_result(png: bytes) -> BetaScreenshotResult:
    return BetaScreenshotResult(data=base64.b64encode(png).decode("ascii"), media_type="image/png")


def _screenshot_png(image_url: str) -> bytes:
    if not image_url.startswith(_PNG_PREFIX):  # pragma: no cover - the drivers write PNG data URLs
        raise ActionFailed("screenshot", f"the driver returned {image_url[:40]!r}, not a PNG")
    return base64.b64decode(image_url[len(_PNG_PREFIX) :])


def _region(member: str, region: list[int]) -> tuple[int, int, int, int]:
    if len(region) != 4 or not all(isinstance(v, int) and not isinstance(v, bool) for v in region):
        raise ActionRejected(member, f"region must be [x0, y0, x1, y1], got {region!r:.60}")
    return region[0], region[1], region[2], region[3]


def _zoom_box(geometry: ViewGeometry, native_width: int, native_height: int) -> tuple[int, int]:
    """The zoom image's size: the region's aspect ratio, as large as fits the screenshot size."""
    scale = min(geometry.width / native_width, geometry.height / native_height)
    return (
        min(geometry.width, max(1, round(native_width * scale))),
        min(geometry.height, max(1, round(native_height * scale))),
    )


def _cursor(geometry: ViewGeometry, native: Point) -> BetaComputerCursorPositionResult:
    model = geometry.to_model(*native)
    if model is None:
        raise ActionFailed(
            "cursor_position",
            f"the pointer is at screen ({native[0]}, {native[1]}), outside the view "
            f"({geometry.describe()})",
        )
    return BetaComputerCursorPositionResult(x=model[0], y=model[1])


def _repeat(member: str, value: int | None) -> int:
    count = 1 if value is None else value
    if isinstance(count, bool) or not 1 <= count <= MAX_REPEAT:
        raise ActionRejected(member, f"repeat must be 1..{MAX_REPEAT}, got {value!r:.20}")
    return count


class ClaudeToolset(BetaAbstractComputerToolset20260801):
    """Claude's computer toolset over a :class:`GuestDriver` (see the module docstring).

    :param driver: the driver every member goes through (its geometry, settle, records).
    :param confirm: the SDK's ``confirm`` callable (required while ``type``/``key``/``hold_key``
        are enabled).
    :param configs: the SDK's per-member ``configs`` (turn members off).
    :param cancelled: checked before each request is sent and while waiting.
    :param owns_driver: :meth:`close` closes ``driver``.
    """

    def __init__(
        self,
        driver: GuestDriver,
        *,
        confirm: BetaComputerConfirmCallable | None = None,
        configs: BetaComputerToolsetConfigsParam | None = None,
        cancelled: Cancelled = None,
        owns_driver: bool = False,
    ) -> None:
        super().__init__(configs=configs, confirm=confirm)
        self.driver = driver
        self._cancelled = cancelled
        self._owns_driver = owns_driver
        self._button_down = False

    @property
    def button_down(self) -> bool:
        """Whether ``left_mouse_down`` left the left button pressed."""
        return self._button_down

    # -- lifecycle -------------------------------------------------------------------------

    def release_held(self) -> list[str]:
        """Release a button ``left_mouse_down`` left pressed (and anything else the guest holds);
        names what was released. Does nothing when nothing is pressed."""
        if not self._button_down:
            return []
        self._button_down = False
        return self.driver.release_all()

    def end_turn(self) -> None:
        """The model's turn ended: release what it left pressed."""
        self.release_held()

    def close(self) -> None:
        """Release what is held, then close the driver if this toolset owns it. Idempotent."""
        super().close()
        try:
            self.release_held()
        finally:
            if self._owns_driver:
                self.driver.close()

    def execute(
        self,
        context: BetaToolsetCallContext,
        name: BetaComputerMemberName,
        input: BetaComputerMemberInput,
    ) -> BetaComputerMemberResult:
        """Run one member; when it fails or is cancelled, release a pressed button first."""
        try:
            return super().execute(context, name, input)
        except BaseException:
            self.release_held()
            raise

    # -- keyboard ------------------------------------------------------------------------------

    def key(self, context: BetaToolsetCallContext, input: BetaComputerKeyInput) -> str | None:
        chords = parse_key_text("key", "text", input.text)
        for _ in range(_repeat("key", input.repeat)):
            for chord in chords:
                self.driver.perform("key", keypress_plan("key", chord), cancelled=self._cancelled)
        return None

    def hold_key(
        self, context: BetaToolsetCallContext, input: BetaComputerHoldKeyInput
    ) -> str | None:
        chord = parse_key_text("hold_key", "text", input.text, one_chord=True)[0]
        seconds = check_seconds("hold_key", "duration", input.duration, MAX_HOLD_S)
        self.driver.perform(
            "hold_key",
            hold_plan("hold_key", chord, seconds),
            cancelled=self._cancelled,
            extra_s=seconds,
        )
        return None

    def type(self, context: BetaToolsetCallContext, input: BetaComputerTypeInput) -> str | None:
        self.driver.perform("type", type_plan("type", input.text), cancelled=self._cancelled)
        return None

    # -- pointer ---------------------------------------------------------------------------

    def cursor_position(
        self, context: BetaToolsetCallContext, input: BetaComputerCursorPositionInput
    ) -> BetaComputerCursorPositionResult:
        return _cursor(self.driver.geometry, self.driver.pointer())

    def mouse_move(
        self, context: BetaToolsetCallContext, input: BetaComputerMouseMoveInput
    ) -> str | None:
        plan = move_plan("mouse_move", input.coordinate)
        self.driver.perform("mouse_move", plan, cancelled=self._cancelled)
        return None

    def left_mouse_down(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftMouseDownInput
    ) -> str | None:
        if self._button_down:
            raise ActionRejected(
                "left_mouse_down", "the left button is already down (left_mouse_up first)"
            )
        plan = mouse_button_plan("left_mouse_down", "mouse_down", self.driver.pointer())
        self.driver.perform("left_mouse_down", plan, cancelled=self._cancelled)
        self._button_down = True
        return None

    def left_mouse_up(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftMouseUpInput
    ) -> str | None:
        if not self._button_down:
            raise ActionRejected(
                "left_mouse_up", "the left button is not down (left_mouse_down first)"
            )
        plan = mouse_button_plan("left_mouse_up", "mouse_up", self.driver.pointer())
        self.driver.perform("left_mouse_up", plan, cancelled=self._cancelled)
        self._button_down = False
        return None

    def _click(self, member: str, input: ClickInput) -> None:
        pointer = self.driver.pointer() if input.coordinate is None else None
        plan = click_plan(member, input.coordinate, input.text, pointer)
        self.driver.perform(member, plan, cancelled=self._cancelled)

    def left_click(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftClickInput
    ) -> str | None:
        self._click("left_click", input)
        return None

    def right_click(
        self, context: BetaToolsetCallContext, input: BetaComputerRightClickInput
    ) -> str | None:
        self._click("right_click", input)
        return None

    def middle_click(
        self, context: BetaToolsetCallContext, input: BetaComputerMiddleClickInput
    ) -> str | None:
        self._click("middle_click", input)
        return None

    def double_click(
        self, context: BetaToolsetCallContext, input: BetaComputerDoubleClickInput
    ) -> str | None:
        self._click("double_click", input)
        return None

    def triple_click(
        self, context: BetaToolsetCallContext, input: BetaComputerTripleClickInput
    ) -> str | None:
        self._click("triple_click", input)
        return None

    def left_click_drag(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftClickDragInput
    ) -> str | None:
        plan = drag_plan("left_click_drag", input.start_coordinate, input.coordinate, input.text)
        self.driver.perform("left_click_drag", plan, cancelled=self._cancelled)
        return None

    def scroll(self, context: BetaToolsetCallContext, input: BetaComputerScrollInput) -> str | None:
        pointer = self.driver.pointer() if input.coordinate is None else None
        plan = scroll_plan(
            "scroll",
            input.coordinate,
            direction=input.scroll_direction,
            amount=input.scroll_amount,
            text=input.text,
            pointer=pointer,
        )
        self.driver.perform("scroll", plan, cancelled=self._cancelled)
        return None

    def wait(self, context: BetaToolsetCallContext, input: BetaComputerWaitInput) -> str | None:
        seconds = check_seconds("wait", "duration", input.duration, MAX_WAIT_S)
        self.driver.perform("wait", wait_plan("wait", seconds), cancelled=self._cancelled)
        return None

    # -- images ----------------------------------------------------------------------------

    def screenshot(
        self, context: BetaToolsetCallContext, input: BetaComputerScreenshotInput
    ) -> BetaScreenshotResult:
        shot = self.driver.screenshot(cancelled=self._cancelled)
        return _png_result(_screenshot_png(shot["image_url"]))

    def zoom(
        self, context: BetaToolsetCallContext, input: BetaComputerZoomInput
    ) -> BetaScreenshotResult:
        geometry = self.driver.geometry
        x0, y0, x1, y1 = _region("zoom", input.region)
        native = geometry.region_to_native(x0, y0, x1, y1, action="zoom")
        png = self.driver.capture(native)
        return _png_result(zoom_image(png, _zoom_box(geometry, native.width, native.height)))


class AsyncClaudeToolset(BetaAsyncAbstractComputerToolset20260801):
    """The async twin of :class:`ClaudeToolset` over an :class:`AsyncGuestDriver`, for
    ``AsyncAnthropic``. Releasing a pressed button on cancellation is shielded."""

    def __init__(
        self,
        driver: AsyncGuestDriver,
        *,
        confirm: BetaAsyncComputerConfirmCallable | None = None,
        configs: BetaComputerToolsetConfigsParam | None = None,
        cancelled: Cancelled = None,
        owns_driver: bool = False,
    ) -> None:
        super().__init__(configs=configs, confirm=confirm)
        self.driver = driver
        self._cancelled = cancelled
        self._owns_driver = owns_driver
        self._button_down = False

    @property
    def button_down(self) -> bool:
        """Whether ``left_mouse_down`` left the left button pressed."""
        return self._button_down

    async def release_held(self) -> list[str]:
        """See :meth:`ClaudeToolset.release_held`; shielded from cancellation."""
        if not self._button_down:
            return []
        self._button_down = False
        released: list[str] = []
        with anyio.CancelScope(shield=True):
            released = await self.driver.release_all()
        return released

    async def end_turn(self) -> None:
        """The model's turn ended: release what it left pressed."""
        await self.release_held()

    async def close(self) -> None:
        """Release what is held, then close the driver if this toolset owns it."""
        await super().close()
        try:
            await self.release_held()
        finally:
            if self._owns_driver:
                await self.driver.aclose()

    async def execute(
        self,
        context: BetaToolsetCallContext,
        name: BetaComputerMemberName,
        input: BetaComputerMemberInput,
    ) -> BetaComputerMemberResult:
        """Run one member; when it fails or is cancelled, release a pressed button first."""
        try:
            return await super().execute(context, name, input)
        except BaseException:
            await self.release_held()
            raise

    async def key(self, context: BetaToolsetCallContext, input: BetaComputerKeyInput) -> str | None:
        chords = parse_key_text("key", "text", input.text)
        for _ in range(_repeat("key", input.repeat)):
            for chord in chords:
                await self.driver.perform(
                    "key", keypress_plan("key", chord), cancelled=self._cancelled
                )
        return None

    async def hold_key(
        self, context: BetaToolsetCallContext, input: BetaComputerHoldKeyInput
    ) -> str | None:
        chord = parse_key_text("hold_key", "text", input.text, one_chord=True)[0]
        seconds = check_seconds("hold_key", "duration", input.duration, MAX_HOLD_S)
        await self.driver.perform(
            "hold_key",
            hold_plan("hold_key", chord, seconds),
            cancelled=self._cancelled,
            extra_s=seconds,
        )
        return None

    async def type(
        self, context: BetaToolsetCallContext, input: BetaComputerTypeInput
    ) -> str | None:
        await self.driver.perform("type", type_plan("type", input.text), cancelled=self._cancelled)
        return None

    async def cursor_position(
        self, context: BetaToolsetCallContext, input: BetaComputerCursorPositionInput
    ) -> BetaComputerCursorPositionResult:
        return _cursor(self.driver.geometry, await self.driver.pointer())

    async def mouse_move(
        self, context: BetaToolsetCallContext, input: BetaComputerMouseMoveInput
    ) -> str | None:
        plan = move_plan("mouse_move", input.coordinate)
        await self.driver.perform("mouse_move", plan, cancelled=self._cancelled)
        return None

    async def left_mouse_down(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftMouseDownInput
    ) -> str | None:
        if self._button_down:
            raise ActionRejected(
                "left_mouse_down", "the left button is already down (left_mouse_up first)"
            )
        plan = mouse_button_plan("left_mouse_down", "mouse_down", await self.driver.pointer())
        await self.driver.perform("left_mouse_down", plan, cancelled=self._cancelled)
        self._button_down = True
        return None

    async def left_mouse_up(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftMouseUpInput
    ) -> str | None:
        if not self._button_down:
            raise ActionRejected(
                "left_mouse_up", "the left button is not down (left_mouse_down first)"
            )
        plan = mouse_button_plan("left_mouse_up", "mouse_up", await self.driver.pointer())
        await self.driver.perform("left_mouse_up", plan, cancelled=self._cancelled)
        self._button_down = False
        return None

    async def _click(self, member: str, input: ClickInput) -> None:
        pointer = await self.driver.pointer() if input.coordinate is None else None
        plan = click_plan(member, input.coordinate, input.text, pointer)
        await self.driver.perform(member, plan, cancelled=self._cancelled)

    async def left_click(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftClickInput
    ) -> str | None:
        await self._click("left_click", input)
        return None

    async def right_click(
        self, context: BetaToolsetCallContext, input: BetaComputerRightClickInput
    ) -> str | None:
        await self._click("right_click", input)
        return None

    async def middle_click(
        self, context: BetaToolsetCallContext, input: BetaComputerMiddleClickInput
    ) -> str | None:
        await self._click("middle_click", input)
        return None

    async def double_click(
        self, context: BetaToolsetCallContext, input: BetaComputerDoubleClickInput
    ) -> str | None:
        await self._click("double_click", input)
        return None

    async def triple_click(
        self, context: BetaToolsetCallContext, input: BetaComputerTripleClickInput
    ) -> str | None:
        await self._click("triple_click", input)
        return None

    async def left_click_drag(
        self, context: BetaToolsetCallContext, input: BetaComputerLeftClickDragInput
    ) -> str | None:
        plan = drag_plan("left_click_drag", input.start_coordinate, input.coordinate, input.text)
        await self.driver.perform("left_click_drag", plan, cancelled=self._cancelled)
        return None

    async def scroll(
        self, context: BetaToolsetCallContext, input: BetaComputerScrollInput
    ) -> str | None:
        pointer = await self.driver.pointer() if input.coordinate is None else None
        plan = scroll_plan(
            "scroll",
            input.coordinate,
            direction=input.scroll_direction,
            amount=input.scroll_amount,
            text=input.text,
            pointer=pointer,
        )
        await self.driver.perform("scroll", plan, cancelled=self._cancelled)
        return None

    async def wait(
        self, context: BetaToolsetCallContext, input: BetaComputerWaitInput
    ) -> str | None:
        seconds = check_seconds("wait", "duration", input.duration, MAX_WAIT_S)
        await self.driver.perform("wait", wait_plan("wait", seconds), cancelled=self._cancelled)
        return None

    async def screenshot(
        self, context: BetaToolsetCallContext, input: BetaComputerScreenshotInput
    ) -> BetaScreenshotResult:
        shot = await self.driver.screenshot(cancelled=self._cancelled)
        return _png_result(_screenshot_png(shot["image_url"]))

    async def zoom(
        self, context: BetaToolsetCallContext, input: BetaComputerZoomInput
    ) -> BetaScreenshotResult:
        geometry = self.driver.geometry
        x0, y0, x1, y1 = _region("zoom", input.region)
        native = geometry.region_to_native(x0, y0, x1, y1, action="zoom")
        png = await self.driver.capture(native)
        return _png_result(zoom_image(png, _zoom_box(geometry, native.width, native.height)))


def claude_turns(runner: Iterator[_T], toolset: ClaudeToolset) -> Iterator[_T]:
    """Iterate a ``tool_runner``'s messages, ending each model turn on ``toolset``: a button the
    previous turn's calls left pressed is released before the next turn runs its calls (the
    runner runs a turn's calls when it is asked for the next message), and when the run ends."""
    try:
        for message in runner:
            toolset.end_turn()
            yield message
    finally:
        toolset.end_turn()


async def aclaude_turns(
    runner: AsyncIterator[_T], toolset: AsyncClaudeToolset
) -> AsyncIterator[_T]:
    """:func:`claude_turns` for the async runner and :class:`AsyncClaudeToolset`."""
    try:
        async for message in runner:
            await toolset.end_turn()
            yield message
    finally:
        await toolset.end_turn()
