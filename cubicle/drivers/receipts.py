"""Action receipts: what the screen did after an action, as the guest agent measured it.

An action sent with settle options (the default, :mod:`cubicle.drivers.settle`) comes back with a
receipt: whether the screen changed visibly (the bounding box of the change is larger than a
caret, :data:`cubicle_guest.protocol.VISIBLE_CHANGE_AREA`), how long the agent waited for the
effect to settle, whether the wait hit its cap, where the change was (native screen pixels), and
which window had the focus before and after. Drivers put it on the action's
:class:`~cubicle.drivers.records.ActionRecord` and keep the last one (``driver.last_receipt``), so
policies, recorders and callers can read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cubicle.drivers.errors import ActionFailed
from cubicle.drivers.viewport import Rect

__all__ = ["FocusedWindow", "Receipt"]


@dataclass(frozen=True)
class FocusedWindow:
    """The window that had the input focus: X id, title, WM_CLASS, EWMH type (``normal``,
    ``dialog``...; empty from an agent that does not report it)."""

    id: int
    title: str
    wm_class: tuple[str, ...] = ()
    type: str = ""

    @classmethod
    def parse(cls, value: object) -> FocusedWindow | None:
        if not isinstance(value, Mapping) or not isinstance(value.get("id"), int):
            return None
        wm_class = value.get("wm_class") or ()
        return cls(
            int(value["id"]),
            str(value.get("title") or ""),
            tuple(str(part) for part in wm_class) if isinstance(wm_class, list) else (),
            str(value.get("type") or ""),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "wm_class": list(self.wm_class),
            "type": self.type,
        }


@dataclass(frozen=True)
class Receipt:
    """What one action did to the screen.

    :param changed: the screen changed visibly after the action (more than a caret).
    :param settled: the screen was quiet before the cap (false: the wait was cut at the cap).
    :param settle_ms: how long the agent waited after the action's input, milliseconds.
    :param damage: bounding box of what changed, native screen pixels (``None``: nothing).
    :param damage_events: change notifications counted (background activity excluded).
    :param method: ``damage`` (X DAMAGE events) or ``poll`` (frame hashing fallback).
    :param focus_before: the focused window before the action (``None``: none).
    :param focus_after: the focused window after the wait.
    :param quiet_ms: the quiet period that ended the wait (``quiet_ms``, ``typing_quiet_ms`` or
        ``idle_quiet_ms`` of the settle spec; ``None``: none did — nothing changed, the cap cut
        it, or an agent that does not say).
    :param last_change_ms: when the last change came, milliseconds after the action's input
        began (``None``: none, or an agent that does not say): the program's own time; the rest
        of ``settle_ms`` is the agent's quiet period.
    """

    changed: bool
    settled: bool
    settle_ms: int
    damage: Rect | None
    damage_events: int
    method: str
    focus_before: FocusedWindow | None
    focus_after: FocusedWindow | None
    quiet_ms: int | None = None
    last_change_ms: int | None = None

    @property
    def focus_changed(self) -> bool:
        before = self.focus_before.id if self.focus_before else None
        after = self.focus_after.id if self.focus_after else None
        return before != after

    @classmethod
    def from_reply(cls, action: str, value: object) -> Receipt:
        """Parse the ``receipt`` of an action's reply.

        :raises ActionFailed: the reply has no well-formed receipt.
        """
        if not isinstance(value, Mapping):
            raise ActionFailed(action, f"the agent's reply has no receipt (got {value!r:.80})")
        try:
            damage = value.get("damage")
            return cls(
                changed=_bool(value["changed"]),
                settled=_bool(value["settled"]),
                settle_ms=_int(value["settle_ms"]),
                damage=None
                if damage is None
                else Rect(
                    _int(damage["x"]),
                    _int(damage["y"]),
                    _int(damage["width"]),
                    _int(damage["height"]),
                ),
                damage_events=_int(value.get("damage_events", 0)),
                method=str(value.get("method") or "?"),
                focus_before=FocusedWindow.parse(value.get("focus_before")),
                focus_after=FocusedWindow.parse(value.get("focus_after")),
                quiet_ms=_optional_int(value.get("quiet_ms")),
                last_change_ms=_optional_int(value.get("last_change_ms")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ActionFailed(
                action, f"the agent's receipt is malformed ({exc}): {dict(value)!r:.200}"
            ) from None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (trajectories, reports)."""
        return {
            "changed": self.changed,
            "settled": self.settled,
            "settle_ms": self.settle_ms,
            "damage": None if self.damage is None else self.damage.as_region(),
            "damage_events": self.damage_events,
            "method": self.method,
            "focus_before": None if self.focus_before is None else self.focus_before.as_dict(),
            "focus_after": None if self.focus_after is None else self.focus_after.as_dict(),
            "quiet_ms": self.quiet_ms,
            "last_change_ms": self.last_change_ms,
        }


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r:.40}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r:.40}")
    return value


def _optional_int(value: object) -> int | None:
    return None if value is None else _int(value)
