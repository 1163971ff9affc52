"""Stall detection: a model acting again and again with nothing visible happening.

State-changing actions are click, double_click, drag, keypress, scroll and type (not move, wait
or screenshot), and the same actions under Claude's member names (``left_click``, ``key`` …) and
Gemini's function names (``click_at``, ``type_text_at`` …). :class:`StallDetector` counts those
whose receipt says the screen did not change visibly, in a row; a visible change resets the
count. When the count reaches ``limit`` the run is stalled: the model is probably clicking
something dead, typing into nothing, or reading a screen it misunderstands. ``cubicle run
--stall N`` stops the run then (``0`` turns it off).
"""

from __future__ import annotations

from typing import Final

from cubicle.drivers.errors import SettleOptionError
from cubicle.drivers.records import ActionRecord

__all__ = ["DEFAULT_STALL_LIMIT", "STATE_CHANGING", "StallDetector"]

STATE_CHANGING: Final = frozenset(
    {
        *("click", "double_click", "drag", "keypress", "scroll", "type"),
        # Claude's computer toolset
        *("left_click", "right_click", "middle_click", "triple_click", "left_click_drag"),
        *("key", "hold_key", "left_mouse_down", "left_mouse_up"),
        # Gemini's computer use
        *("click_at", "type_text_at", "key_combination", "scroll_document", "scroll_at"),
        "drag_and_drop",
    }
)
DEFAULT_STALL_LIMIT: Final = 8
"""State-changing actions in a row with no visible change before a run counts as stalled.
Models legitimately send a few inert actions (a click into a field that already has the focus,
a scroll at the end of a page); eight in a row is several turns of nothing happening."""


class StallDetector:
    """Counts state-changing actions without a visible change, in a row.

    :param limit: the count that makes a stall; ``0`` never stalls.
    :raises SettleOptionError: ``limit`` is not an integer >= 0.
    """

    def __init__(self, limit: int = DEFAULT_STALL_LIMIT) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise SettleOptionError(f"stall limit must be an integer >= 0, got {limit!r}")
        self.limit = limit
        self.unchanged_in_row = 0

    def observe(self, record: ActionRecord) -> bool:
        """Take one driver record; return True when this record makes the run stalled.

        Records without a receipt (settling off, failed or rejected actions) do not count.
        """
        if record.kind not in STATE_CHANGING or record.receipt is None:
            return False
        if record.receipt.changed:
            self.unchanged_in_row = 0
            return False
        self.unchanged_in_row += 1
        return self.limit > 0 and self.unchanged_in_row == self.limit
