"""A cubicle desktop as the ``Computer`` of the OpenAI Agents SDK (extra: ``cubicle[agents]``).

::

    from agents import Agent, ComputerTool, Runner
    from cubicle.drivers import GuestDriver, NonInteractive
    from cubicle.drivers.agents_computer import CubicleComputer, SafetyCheckApproval

    with GuestDriver(sandbox.connect()) as driver, CubicleComputer(driver) as computer:
        tool = ComputerTool(computer=computer,
                            on_safety_check=SafetyCheckApproval(NonInteractive()))
        Runner.run_sync(Agent(name="desk", tools=[tool]), "Save a note")

:class:`CubicleComputer` (``agents.Computer``) wraps a
:class:`~cubicle.drivers.computer.GuestDriver` and :class:`AsyncCubicleComputer`
(``agents.AsyncComputer``) an
:class:`~cubicle.drivers.async_computer.AsyncGuestDriver`: every call becomes the driver's action,
so the Agents SDK gets exactly what ``openai.ComputerToolset`` gets — coordinates checked against
the screenshot the model saw and mapped to screen pixels (:mod:`cubicle.drivers.viewport`; a point
outside it raises :class:`~cubicle.drivers.errors.CoordinateOutOfView`, nothing is clamped), the
one key table (an unknown key name raises :class:`~cubicle.drivers.errors.ActionRejected`), settled
actions with receipts (``computer.driver.last_receipt``), and the driver's ``on_action`` observer
(the trajectory recorder). Errors propagate out of the SDK's run; nothing is sent for an invalid
action.

Approvals: :class:`SafetyCheckApproval` / :class:`AsyncSafetyCheckApproval` turn any of our
:mod:`cubicle.drivers.approvals` policies (or any ``approve_safety_checks(call) -> bool`` callable)
into ``ComputerTool(on_safety_check=...)``. The Agents SDK has no ``before_action`` hook, so the
computers take one: ``before_action(action) -> bool`` sees each valid action as the SDK's
``computer_action`` model before it is sent; a refusal raises :class:`ActionDenied`, which stops
the run (as ``ComputerToolset`` stops on a refused action).

This is the only module that imports ``agents`` (the optional ``openai-agents`` package);
importing it without the extra raises :class:`AgentsSdkMissing`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar

import anyio.to_thread
from openai.lib.computer import Screenshot
from openai.types.responses import ResponseComputerToolCall
from openai.types.responses import computer_action as modern

from cubicle.drivers.actions import plan_action
from cubicle.drivers.approvals import ApprovalPolicy, AsyncApprovals
from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import ActionRejected, DriverError
from cubicle.drivers.steps import DriverBase

try:
    from agents import AsyncComputer, Computer
    from agents.tool import ComputerToolSafetyCheckData
except ImportError as _missing:  # pragma: no cover - exercised only without the extra
    from cubicle_guest.errors import CubicleError

    class AgentsSdkMissing(CubicleError, ImportError):
        """The ``openai-agents`` package (the ``agents`` extra) is not installed."""

    raise AgentsSdkMissing(
        "cubicle.drivers.agents_computer needs the OpenAI Agents SDK: "
        "pip install 'cubicle[agents]' "
        f"({_missing})"
    ) from _missing

__all__ = [
    "ActionDenied",
    "AsyncCubicleComputer",
    "AsyncSafetyCheckApproval",
    "CubicleComputer",
    "SafetyCheckApproval",
]

Environment = Literal["mac", "windows", "ubuntu", "browser"]
BeforeAction = Callable[[Any], bool]
"""``before_action(action) -> bool``: ``True`` lets the action run (e.g.
:meth:`cubicle.drivers.approvals.ApprovalPolicy.before_action`)."""
AsyncBeforeAction = Callable[[Any], bool | Awaitable[bool]]
ApproveCall = Callable[[ResponseComputerToolCall], bool]
"""``approve_safety_checks(call) -> bool``, as ``ComputerToolset.run`` takes it."""


class ActionDenied(DriverError, PermissionError):
    """``before_action`` refused an action; nothing was sent to the guest.

    :param action: the action type.
    """

    def __init__(self, action: str) -> None:
        self.action = action
        super().__init__(f"{action}: refused by before_action; nothing was sent")


# -- the SDK's arguments as the openai computer actions our drivers take ----------------------


def _with_keys(fields: dict[str, Any], keys: object) -> dict[str, Any]:
    if keys is not None:
        fields["keys"] = keys
    return fields


def _drag_path(path: object) -> object:
    """``[(x, y), ...]`` → ``[DragPath, ...]``; anything else is left for the driver to reject."""
    if not isinstance(path, list | tuple):
        return path
    points: list[object] = []
    for index, point in enumerate(path):
        if not isinstance(point, list | tuple) or len(point) != 2:
            raise ActionRejected("drag", f"path[{index}] must be an (x, y) pair, got {point!r:.40}")
        points.append(modern.DragPath.model_construct(x=point[0], y=point[1]))
    return points


# Built with ``model_construct``: no pydantic coercion, so a float or a string reaches our
# validation (cubicle.drivers.actions) and is refused there, naming the field.
def _click(x: object, y: object, button: object, keys: object) -> modern.Click:
    return modern.Click.model_construct(
        **_with_keys({"type": "click", "x": x, "y": y, "button": button}, keys)
    )


def _double_click(x: object, y: object, keys: object) -> modern.DoubleClick:
    return modern.DoubleClick.model_construct(
        **_with_keys({"type": "double_click", "x": x, "y": y}, keys)
    )


def _scroll(x: object, y: object, dx: object, dy: object, keys: object) -> modern.Scroll:
    fields = {"type": "scroll", "x": x, "y": y, "scroll_x": dx, "scroll_y": dy}
    return modern.Scroll.model_construct(**_with_keys(fields, keys))


def _move(x: object, y: object, keys: object) -> modern.Move:
    return modern.Move.model_construct(**_with_keys({"type": "move", "x": x, "y": y}, keys))


def _drag(path: object, keys: object) -> modern.Drag:
    fields = {"type": "drag", "path": _drag_path(path)}
    return modern.Drag.model_construct(**_with_keys(fields, keys))


def _base64(shot: Screenshot) -> str:
    """The base64 PNG of the driver's screenshot (the SDK adds the ``data:`` prefix itself)."""
    url = shot.get("image_url") or ""
    header, _, data = url.partition(",")
    if header != "data:image/png;base64" or not data:
        raise DriverError(f"the driver returned a screenshot that is not a PNG data URL: {url:.40}")
    return data


def _valid(kind: str, action: object, driver: DriverBase) -> bool:
    """Whether ``action`` validates (the driver raises and records it otherwise)."""
    try:
        plan_action(kind, action, driver.geometry)
    except ActionRejected:
        return False
    return True


D = TypeVar("D", bound=DriverBase)
B = TypeVar("B")


class _Meta(Generic[D, B]):
    """What both computers share: construction, ``environment`` and ``dimensions`` (the
    preview tool's ``computer_use_preview`` payload needs them; the GA ``computer`` tool
    ignores them) and the driver."""

    def __init__(
        self,
        driver: D,
        *,
        before_action: B | None = None,
        environment: Environment = "ubuntu",
        owns_driver: bool = False,
    ) -> None:
        self._driver = driver
        self._before_action = before_action
        self._environment = environment
        self._owns_driver = owns_driver

    @property
    def environment(self) -> Environment:
        """The guest's kind for the preview tool: ``ubuntu`` (a Debian desktop) by default."""
        return self._environment

    @property
    def dimensions(self) -> tuple[int, int]:
        """The model's view ``(width, height)``: the size of every screenshot it receives."""
        geometry = self._driver.geometry
        return geometry.width, geometry.height

    @property
    def driver(self) -> D:
        """The wrapped driver (``last_receipt``, ``geometry``, ``on_action``)."""
        return self._driver


class CubicleComputer(_Meta[GuestDriver, BeforeAction], Computer):
    """``agents.Computer`` over a :class:`~cubicle.drivers.computer.GuestDriver`.

    :param driver: the driver; the caller owns it unless ``owns_driver``.
    :param before_action: asked before each valid action is sent; ``False`` raises
        :class:`ActionDenied` (default: every action runs).
    :param environment: what the preview tool is told the computer is.
    :param owns_driver: close ``driver`` in :meth:`close`.

    The Agents SDK calls a sync computer on its event loop's thread: each call blocks until the
    guest answered (bounded by the driver's deadlines). Use :class:`AsyncCubicleComputer` to keep
    the loop free.
    """

    def close(self) -> None:
        """Close the driver if this computer owns it. Idempotent; never touches the guest."""
        if self._owns_driver:
            self._driver.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _allow(self, kind: str, action: object) -> None:
        if (
            self._before_action is not None
            and _valid(kind, action, self._driver)
            and self._before_action(action) is not True
        ):
            raise ActionDenied(kind)

    def screenshot(self) -> str:
        return _base64(self._driver.screenshot())

    def click(self, x: int, y: int, button: str, *, keys: list[str] | None = None) -> None:
        action = _click(x, y, button, keys)
        self._allow("click", action)
        self._driver.click(action)

    def double_click(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        action = _double_click(x, y, keys)
        self._allow("double_click", action)
        self._driver.double_click(action)

    def scroll(
        self, x: int, y: int, scroll_x: int, scroll_y: int, *, keys: list[str] | None = None
    ) -> None:
        action = _scroll(x, y, scroll_x, scroll_y, keys)
        self._allow("scroll", action)
        self._driver.scroll(action)

    def type(self, text: str) -> None:
        action = modern.Type.model_construct(type="type", text=text)
        self._allow("type", action)
        self._driver.type(action)

    def wait(self) -> None:
        """Wait the driver's ``wait_ms``."""
        action = modern.Wait.model_construct(type="wait")
        self._allow("wait", action)
        self._driver.wait(action)

    def move(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        action = _move(x, y, keys)
        self._allow("move", action)
        self._driver.move(action)

    def keypress(self, keys: list[str]) -> None:
        action = modern.Keypress.model_construct(type="keypress", keys=keys)
        self._allow("keypress", action)
        self._driver.keypress(action)

    def drag(self, path: list[tuple[int, int]], *, keys: list[str] | None = None) -> None:
        action = _drag(path, keys)
        self._allow("drag", action)
        self._driver.drag(action)


class AsyncCubicleComputer(_Meta[AsyncGuestDriver, AsyncBeforeAction], AsyncComputer):
    """``agents.AsyncComputer`` over an :class:`~cubicle.drivers.async_computer.AsyncGuestDriver`.

    Parameters as :class:`CubicleComputer`; ``before_action`` may also be async (e.g.
    :meth:`cubicle.drivers.approvals.AsyncApprovals.before_action`, which keeps a terminal prompt
    off the event loop).
    """

    async def aclose(self) -> None:
        """Close the driver if this computer owns it. Idempotent; never touches the guest."""
        if self._owns_driver:
            await self._driver.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _allow(self, kind: str, action: object) -> None:
        if self._before_action is None or not _valid(kind, action, self._driver):
            return
        verdict = self._before_action(action)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict is not True:
            raise ActionDenied(kind)

    async def screenshot(self) -> str:
        return _base64(await self._driver.screenshot())

    async def click(self, x: int, y: int, button: str, *, keys: list[str] | None = None) -> None:
        action = _click(x, y, button, keys)
        await self._allow("click", action)
        await self._driver.click(action)

    async def double_click(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        action = _double_click(x, y, keys)
        await self._allow("double_click", action)
        await self._driver.double_click(action)

    async def scroll(
        self, x: int, y: int, scroll_x: int, scroll_y: int, *, keys: list[str] | None = None
    ) -> None:
        action = _scroll(x, y, scroll_x, scroll_y, keys)
        await self._allow("scroll", action)
        await self._driver.scroll(action)

    async def type(self, text: str) -> None:
        action = modern.Type.model_construct(type="type", text=text)
        await self._allow("type", action)
        await self._driver.type(action)

    async def wait(self) -> None:
        """Wait the driver's ``wait_ms``."""
        action = modern.Wait.model_construct(type="wait")
        await self._allow("wait", action)
        await self._driver.wait(action)

    async def move(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        action = _move(x, y, keys)
        await self._allow("move", action)
        await self._driver.move(action)

    async def keypress(self, keys: list[str]) -> None:
        action = modern.Keypress.model_construct(type="keypress", keys=keys)
        await self._allow("keypress", action)
        await self._driver.keypress(action)

    async def drag(self, path: list[tuple[int, int]], *, keys: list[str] | None = None) -> None:
        action = _drag(path, keys)
        await self._allow("drag", action)
        await self._driver.drag(action)


# -- safety checks ------------------------------------------------------------------------------


def _approver(policy: ApprovalPolicy | ApproveCall) -> ApproveCall:
    return policy.approve_safety_checks if isinstance(policy, ApprovalPolicy) else policy


def _one_check_call(data: ComputerToolSafetyCheckData) -> ResponseComputerToolCall:
    """The SDK asks once per pending check: the call as if that check were its only one."""
    call: ResponseComputerToolCall = data.tool_call.model_copy(
        update={"pending_safety_checks": [data.safety_check]}
    )
    return call


class SafetyCheckApproval:
    """``ComputerTool(on_safety_check=...)`` deciding with one of our approval policies.

    :param policy: an :class:`~cubicle.drivers.approvals.ApprovalPolicy` (every decision lands in
    its
        decision log) or any ``approve_safety_checks(call) -> bool`` callable, such as
        :meth:`cubicle.orchestrator.modelrun.loop.RecordedSession.approve_safety_checks`.

    The Agents SDK calls it once per pending check of a computer call; the policy sees the call
    with that one check. Only exactly ``True`` acknowledges it; anything else refuses, and the
    SDK then stops the run before the call's actions (``UserError``).
    """

    def __init__(self, policy: ApprovalPolicy | ApproveCall) -> None:
        self._approve = _approver(policy)

    def __call__(self, data: ComputerToolSafetyCheckData) -> bool:
        return self._approve(_one_check_call(data)) is True


class AsyncSafetyCheckApproval:
    """:class:`SafetyCheckApproval` for async runs: the policy runs in a worker thread (as in
    :class:`~cubicle.drivers.approvals.AsyncApprovals`), so a terminal prompt never blocks the
    loop."""

    def __init__(self, policy: ApprovalPolicy | ApproveCall | AsyncApprovals) -> None:
        self._approve = _approver(policy.policy if isinstance(policy, AsyncApprovals) else policy)

    async def __call__(self, data: ComputerToolSafetyCheckData) -> bool:
        call = _one_check_call(data)
        verdict = await anyio.to_thread.run_sync(self._approve, call, abandon_on_cancel=True)
        return verdict is True
