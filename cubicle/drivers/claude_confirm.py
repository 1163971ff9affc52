"""Claude's ``confirm`` over cubicle's approval policies (:mod:`cubicle.drivers.approvals`).

The computer toolset asks ``confirm(context)`` before each member call it is about to run
(required while ``type``, ``key`` or ``hold_key`` is enabled). :class:`ClaudeConfirm` answers with
an :class:`~cubicle.drivers.approvals.ApprovalPolicy`, exactly as ``before_action`` does on the
OpenAI path: the member becomes :class:`~cubicle.drivers.decisions.ActionFacts` (kind = the member's
name, its points in screenshot and screen pixels under the driver's geometry, its keys or text),
the policy judges it, and the decision — what was asked, who answered, why — goes to the
policy's :class:`~cubicle.drivers.decisions.DecisionLog`. The default policy for unattended runs
(:class:`~cubicle.drivers.approvals.NonInteractive`) denies, so a run without a terminal refuses
keyboard input unless its policy says otherwise. :class:`AsyncClaudeConfirm` runs the decision in
a worker thread (a terminal prompt blocks), for the async toolset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio.to_thread
from anthropic.tools import BetaComputerConfirmContext

from cubicle.drivers.approvals import ApprovalPolicy
from cubicle.drivers.claude_keys import parse_key_text
from cubicle.drivers.decisions import ActionFacts, GeometrySource
from cubicle.drivers.errors import ActionRejected
from cubicle.drivers.viewport import Point, ViewGeometry

__all__ = ["AsyncClaudeConfirm", "ClaudeConfirm", "claude_facts"]

_POINT_FIELDS = ("start_coordinate", "coordinate")


def _points(values: Mapping[str, Any]) -> tuple[Point, ...]:
    points = []
    for name in _POINT_FIELDS:
        value = values.get(name)
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            points.append((int(value[0]), int(value[1])))
    return tuple(points)


def claude_facts(
    member: str, values: Mapping[str, Any], geometry: ViewGeometry | None
) -> ActionFacts:
    """A member call as a policy sees it. A point the driver will refuse (outside the screenshot)
    gives ``native_points=None``; keys are the keysyms the chords press (as written when they do
    not parse: the driver refuses those too)."""
    model = _points(values)
    native: tuple[Point, ...] | None = ()
    if geometry is not None and model:
        try:
            native = tuple(geometry.to_native(x, y, action=member) for x, y in model)
        except ActionRejected:
            native = None
    keys: tuple[str, ...] = ()
    text = values.get("text")
    if isinstance(text, str) and member != "type":
        try:
            keys = tuple(key for chord in parse_key_text(member, "text", text) for key in chord)
        except ActionRejected:
            keys = tuple(text.split())
    direction, amount = values.get("scroll_direction"), values.get("scroll_amount")
    return ActionFacts(
        member,
        model,
        native,
        keys,
        text if member == "type" and isinstance(text, str) else None,
        "left" if member in ("left_click", "double_click", "triple_click") else None,
        None if not isinstance(amount, int) else _scroll(direction, amount),
    )


def _scroll(direction: object, amount: int) -> Point | None:
    steps = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
    if not isinstance(direction, str) or direction not in steps:
        return None
    return steps[direction][0] * amount, steps[direction][1] * amount


class ClaudeConfirm:
    """``confirm`` for :class:`~cubicle.drivers.claude_toolset.ClaudeToolset` over ``policy``.

    :param geometry: the driver (or anything with ``.geometry``), for screen coordinates.
    """

    def __init__(self, policy: ApprovalPolicy, geometry: GeometrySource | None = None) -> None:
        self.policy = policy
        self.geometry = geometry if geometry is not None else policy.geometry

    def facts(self, context: BetaComputerConfirmContext) -> ActionFacts:
        values = context.input.model_dump(exclude_none=True)
        return claude_facts(
            context.member, values, self.geometry.geometry if self.geometry else None
        )

    def __call__(self, context: BetaComputerConfirmContext) -> bool:
        return self.policy.allows(self.facts(context))


class AsyncClaudeConfirm:
    """:class:`ClaudeConfirm` for the async toolset: the decision runs in a worker thread."""

    def __init__(self, policy: ApprovalPolicy, geometry: GeometrySource | None = None) -> None:
        self.confirm = ClaudeConfirm(policy, geometry)
        self.policy = policy

    async def __call__(self, context: BetaComputerConfirmContext) -> bool:
        facts = self.confirm.facts(context)
        return await anyio.to_thread.run_sync(self.policy.allows, facts, abandon_on_cancel=True)
