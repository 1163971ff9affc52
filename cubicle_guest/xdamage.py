"""One X connection with a DAMAGE object on the root window: every drawing into any window is
reported on it. Shared by the change tracker (:mod:`cubicle_guest.changes`) and the frame cache
(:mod:`cubicle_guest.framecache`), each with the report level it needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from Xlib import display as xdisplay
from Xlib import error as xerror

from cubicle_guest.errors import GuestError

__all__ = ["RootDamage", "open_root_damage"]


@dataclass(frozen=True)
class RootDamage:
    """The connection (its owner closes it), the DAMAGE object's id, the event type its
    notifications carry, and the root window."""

    display: xdisplay.Display
    damage: int
    event_type: int
    root: Any


def open_root_damage(display_name: str | None, level: int) -> RootDamage:
    """Open ``display_name`` and create a DAMAGE object on its root at ``level``
    (``Xlib.ext.damage.DamageReport*``; python-xlib adds the extension's methods to a connection
    to a server that has it); the connection is closed again if that fails.

    :raises GuestError: ``x11_error`` when the display cannot be opened or has no DAMAGE.
    """
    try:
        connection = xdisplay.Display(display_name)
    except (xerror.DisplayError, OSError) as exc:
        raise GuestError("x11_error", f"cannot open X display {display_name!r}: {exc}") from exc
    try:
        if not connection.has_extension("DAMAGE"):
            raise GuestError("x11_error", "the X server has no DAMAGE extension")
        connection.damage_query_version()
        event_type = connection.query_extension("DAMAGE").first_event
        root = connection.screen().root
        damage_id = root.damage_create(level)
        connection.sync()
    except BaseException:
        connection.close()
        raise
    return RootDamage(connection, damage_id, event_type, root)
