"""List top-level windows of an X display (python-xlib).

With a window manager (EWMH ``_NET_CLIENT_LIST`` on the root) the list is the WM's clients;
without one it is the root's mapped (viewable) children. Geometry is in root coordinates, pixels.
"""

from __future__ import annotations

from typing import Any

from Xlib import X, Xatom, error
from Xlib.display import Display

__all__ = ["active_window", "list_windows", "window_pid"]


def _property(display: Display, window: Any, name: str, kind: int) -> Any:
    atom = display.get_atom(name, only_if_exists=True)
    if atom == X.NONE:
        return None
    reply = window.get_full_property(atom, kind)
    return None if reply is None else reply.value


def _pid(display: Display, window: Any) -> int | None:
    value = _property(display, window, "_NET_WM_PID", Xatom.CARDINAL)
    return int(value[0]) if value is not None and len(value) else None


def window_pid(display: Display, window_id: int) -> int | None:
    """The ``_NET_WM_PID`` of a window (``None``: not set, or the window is gone)."""
    try:
        return _pid(display, display.create_resource_object("window", window_id))
    except error.XError:
        return None


def _title(display: Display, window: Any) -> str:
    utf8 = display.get_atom("UTF8_STRING")
    value = _property(display, window, "_NET_WM_NAME", utf8)
    if value is None:
        value = _property(display, window, "WM_NAME", X.AnyPropertyType)
    if value is None:
        return ""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("latin-1")  # WM_NAME of type STRING is ISO 8859-1
    return str(value)


def list_windows(display: Display) -> list[dict[str, Any]]:
    """Top-level windows: id, title, wm_class, type, x, y, width, height, pid (if set), focused.

    ``type`` is the EWMH window type in lower case (``normal`` when unset; ``dock`` for panels).

    Windows that vanish while being listed are skipped (they are no longer top-level windows).
    """
    root = display.screen().root
    clients = _property(display, root, "_NET_CLIENT_LIST", Xatom.WINDOW)
    if clients is not None:
        candidates = [display.create_resource_object("window", int(wid)) for wid in clients]
    else:
        candidates = [
            child
            for child in root.query_tree().children
            if child.get_attributes().map_state == X.IsViewable
        ]
    focus = display.get_input_focus().focus
    focus_id = getattr(focus, "id", None)
    active = _property(display, root, "_NET_ACTIVE_WINDOW", Xatom.WINDOW)
    active_id = int(active[0]) if active is not None and len(active) else None
    windows: list[dict[str, Any]] = []
    for window in candidates:
        try:
            geometry = window.get_geometry()
            origin = window.translate_coords(root, 0, 0)
            wm_class = window.get_wm_class()
            pid = _pid(display, window)
            entry: dict[str, Any] = {
                "id": int(window.id),
                "title": _title(display, window),
                "wm_class": list(wm_class) if wm_class else [],
                "type": _window_type(display, window),
                "x": -int(origin.x),
                "y": -int(origin.y),
                "width": int(geometry.width),
                "height": int(geometry.height),
                "focused": int(window.id) in (focus_id, active_id)
                or _is_ancestor_of(window, focus),
            }
            if pid is not None:
                entry["pid"] = pid
            windows.append(entry)
        except (error.BadWindow, error.BadDrawable, error.BadMatch):
            continue
    return windows


_TYPE_PREFIX = "_NET_WM_WINDOW_TYPE_"


def _window_type(display: Display, window: Any) -> str:
    """The EWMH window type in lower case (``normal``, ``dialog``, ``dock``, ...)."""
    value = _property(display, window, "_NET_WM_WINDOW_TYPE", Xatom.ATOM)
    if value is None or not len(value):
        return "normal"
    name = display.get_atom_name(int(value[0])) or ""
    return name.removeprefix(_TYPE_PREFIX).lower() or "normal"


def _is_ancestor_of(window: Any, other: Any) -> bool:
    """True if ``other`` is ``window`` or inside it (focus often sits on a child window)."""
    if not hasattr(other, "query_tree"):
        return False
    current = other
    for _ in range(64):
        if current.id == window.id:
            return True
        parent = current.query_tree().parent
        if not parent or parent.id in (0, current.id):
            return False
        current = parent
    return False


def active_window(display: Display) -> dict[str, Any] | None:
    """The window with the input focus: ``id``, ``title``, ``wm_class``, ``type`` (EWMH, lower
    case: ``normal``, ``dialog``...) — or None.

    The window manager's ``_NET_ACTIVE_WINDOW`` when it names one, otherwise the X input focus
    (walked up to its top-level child of the root). Cheap: a few property reads, no tree walk of
    every window.
    """
    root = display.screen().root
    try:
        active = _property(display, root, "_NET_ACTIVE_WINDOW", Xatom.WINDOW)
        if active is not None and len(active) and int(active[0]):
            window = display.create_resource_object("window", int(active[0]))
        else:
            window = display.get_input_focus().focus
            if not hasattr(window, "query_tree") or window.id == root.id:
                return None
            for _ in range(64):
                parent = window.query_tree().parent
                if not parent or parent.id in (0, root.id):
                    break
                window = parent
        wm_class = window.get_wm_class()
        return {
            "id": int(window.id),
            "title": _title(display, window),
            "wm_class": list(wm_class) if wm_class else [],
            "type": _window_type(display, window),
        }
    except (error.BadWindow, error.BadDrawable, error.BadMatch):
        return None
