"""A test X client that maps a window and records the input events the X server delivers to it.

    with Recorder(x.display) as rec:               # fullscreen window at 0,0, focused
        client.click(960, 540)
        press = rec.wait_for(lambda e: e.kind == "ButtonPress")
        assert (press.button, press.root_x, press.root_y) == (1, 960, 540)

Events are read by a background thread on the recorder's own python-xlib connection. Key events
are resolved to keysyms *when they are read*, through the server's current keyboard mapping
(the recorder refreshes its copy on every MappingNotify, which the server queues before any
event that used the new mapping), so keys typed through remapped spare keycodes resolve
exactly. Resolution follows the core rules cubicle's agent uses: the Shift modifier selects the
second keysym of a printable or keypad key.

The recorder owns its window and connection; ``stop()`` (or leaving the ``with``) closes both.
"""

from __future__ import annotations

import dataclasses
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from Xlib import XK, X, display

from cubicle_guest.keys import keysym_name

__all__ = ["RecordedEvent", "Recorder", "keysym_char"]

_MODIFIER_NAMES = (
    (X.ShiftMask, "shift"),
    (X.LockMask, "lock"),
    (X.ControlMask, "control"),
    (X.Mod1Mask, "mod1"),
    (X.Mod2Mask, "mod2"),
    (X.Mod3Mask, "mod3"),
    (X.Mod4Mask, "mod4"),
    (X.Mod5Mask, "mod5"),
)
_KIND = {
    X.ButtonPress: "ButtonPress",
    X.ButtonRelease: "ButtonRelease",
    X.KeyPress: "KeyPress",
    X.KeyRelease: "KeyRelease",
    X.MotionNotify: "MotionNotify",
}


def keysym_char(keysym: int) -> str | None:
    """The character a text widget inserts for ``keysym`` (None for non-text keys)."""
    if keysym in (XK.XK_Return, XK.XK_KP_Enter):
        return "\n"
    if keysym == XK.XK_Tab:
        return "\t"
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    if 0x01000100 <= keysym <= 0x0110FFFF:
        return chr(keysym - 0x01000000)
    return None


@dataclass(frozen=True)
class RecordedEvent:
    """One delivered event. Coordinates are pixels: ``x``/``y`` in the recorder window,
    ``root_x``/``root_y`` on the screen. ``state`` is the modifier/button mask *before* the
    event (X semantics)."""

    kind: str
    x: int
    y: int
    root_x: int
    root_y: int
    state: int
    time: int
    button: int | None = None
    keycode: int | None = None
    keysym: int | None = None
    keysym_name: str | None = None
    char: str | None = None

    @property
    def modifiers(self) -> frozenset[str]:
        return frozenset(name for mask, name in _MODIFIER_NAMES if self.state & mask)


class Recorder:
    """Map a window on ``display_name`` and record what it receives.

    :param geometry: (x, y, width, height) in screen pixels; default fullscreen at 0,0.
    :param motion: also record MotionNotify (on by default).
    """

    def __init__(
        self,
        display_name: str,
        geometry: tuple[int, int, int, int] | None = None,
        *,
        motion: bool = True,
        title: str = "cubicle-recorder",
    ) -> None:
        self._display_name = display_name
        self._geometry = geometry
        self._motion = motion
        self._title = title
        self._events: list[RecordedEvent] = []
        self._condition = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._display: Any = None
        self._wake: tuple[int, int] | None = None
        """A pipe whose write end :meth:`stop` closes: the reader thread leaves at once."""
        self.window_id = 0
        self.error: BaseException | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Self:
        self._display = display.Display(self._display_name)
        screen = self._display.screen()
        x, y, width, height = self._geometry or (
            0,
            0,
            screen.width_in_pixels,
            screen.height_in_pixels,
        )
        mask = (
            X.ButtonPressMask
            | X.ButtonReleaseMask
            | X.KeyPressMask
            | X.KeyReleaseMask
            | X.StructureNotifyMask
            | X.ExposureMask
        )
        if self._motion:
            mask |= X.PointerMotionMask
        window = screen.root.create_window(
            x,
            y,
            width,
            height,
            0,
            screen.root_depth,
            X.InputOutput,
            X.CopyFromParent,
            background_pixel=screen.white_pixel,
            event_mask=mask,
            override_redirect=True,
        )
        window.set_wm_name(self._title)
        window.map()
        self._window = window
        self.window_id = int(window.id)
        deadline = time.monotonic() + timeout
        mapped = False
        while not mapped:  # wait for MapNotify before accepting input
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"recorder window not mapped on {self._display_name} within {timeout} s"
                )
            while self._display.pending_events():
                if self._display.next_event().type == X.MapNotify:
                    mapped = True
            if not mapped:
                select.select([self._display], [], [], 0.05)
        window.raise_window()
        self.focus()
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._run, daemon=True, name="x-recorder")
        self._thread.start()
        return self

    def focus(self) -> None:
        """Give the recorder window the keyboard focus."""
        self._display.set_input_focus(self._window, X.RevertToParent, X.CurrentTime)
        self._display.sync()

    def stop(self) -> None:
        """Stop the reader thread, destroy the window, close the connection (idempotent)."""
        self._stop.set()
        if self._wake is not None:
            os.close(self._wake[1])  # the reader's select sees the pipe's end
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._wake is not None:
            os.close(self._wake[0])
            self._wake = None
        if self._display is not None:
            try:
                self._window.destroy()
                self._display.sync()
            except Exception:  # the server may be gone already; nothing left to clean
                pass
            self._display.close()
            self._display = None

    def __enter__(self) -> Self:
        return self.start() if self._display is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- reading --------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake[0]
        try:
            while not self._stop.is_set():
                if not self._display.pending_events():
                    # events the main thread's requests queued raise no select: look again soon
                    select.select([self._display, wake], [], [], 0.05)
                    continue
                event = self._display.next_event()
                if event.type == X.MappingNotify:
                    self._display.refresh_keyboard_mapping(event)
                    continue
                kind = _KIND.get(event.type)
                if kind is None:
                    continue
                recorded = self._record(kind, event)
                with self._condition:
                    self._events.append(recorded)
                    self._condition.notify_all()
        except BaseException as exc:  # surfaced by wait_for, never swallowed
            self.error = exc
            with self._condition:
                self._condition.notify_all()

    def _record(self, kind: str, event: Any) -> RecordedEvent:
        recorded = RecordedEvent(
            kind,
            int(event.event_x),
            int(event.event_y),
            int(event.root_x),
            int(event.root_y),
            int(event.state),
            int(event.time),
        )
        if kind in ("ButtonPress", "ButtonRelease"):
            return dataclasses.replace(recorded, button=int(event.detail))
        if kind in ("KeyPress", "KeyRelease"):
            keycode = int(event.detail)
            keysym = self.lookup_keysym(keycode, int(event.state))
            return dataclasses.replace(
                recorded,
                keycode=keycode,
                keysym=keysym,
                keysym_name=keysym_name(keysym),
                char=keysym_char(keysym),
            )
        return recorded

    def lookup_keysym(self, keycode: int, state: int) -> int:
        """Keysym of ``keycode`` under modifier ``state`` with the recorder's current mapping."""
        base = int(self._display.keycode_to_keysym(keycode, 0))
        if state & X.ShiftMask and (base < 0xFF00 or 0xFF80 <= base <= 0xFFBD):
            shifted = int(self._display.keycode_to_keysym(keycode, 1))
            if shifted:
                return shifted
            if ord("a") <= base <= ord("z"):
                return base - 0x20
        return base

    # -- assertions -----------------------------------------------------------------------

    @property
    def events(self) -> list[RecordedEvent]:
        """A snapshot of every event recorded so far, in delivery order."""
        with self._condition:
            return list(self._events)

    def clear(self) -> None:
        with self._condition:
            self._events.clear()

    def wait_until(
        self,
        condition: Callable[[list[RecordedEvent]], bool],
        timeout: float = 5.0,
        what: str = "condition",
    ) -> list[RecordedEvent]:
        """Wait until ``condition(events)`` holds; return the events.

        :raises AssertionError: on timeout, listing what was recorded.
        """
        deadline = time.monotonic() + timeout
        with self._condition:
            while not condition(list(self._events)):
                if self.error is not None:
                    raise AssertionError(f"recorder failed: {self.error!r}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    summary = ", ".join(_describe(e) for e in self._events[-30:])
                    raise AssertionError(
                        f"{what} not seen within {timeout} s; last events: [{summary}]"
                    )
                self._condition.wait(remaining)
            return list(self._events)

    def wait_for(
        self, predicate: Callable[[RecordedEvent], bool], timeout: float = 5.0, what: str = "event"
    ) -> RecordedEvent:
        """Wait for the first recorded event matching ``predicate`` and return it."""
        events = self.wait_until(lambda evs: any(predicate(e) for e in evs), timeout, what)
        return next(e for e in events if predicate(e))

    def key_events(self, kind: str = "KeyPress") -> list[RecordedEvent]:
        return [e for e in self.events if e.kind == kind]

    def text(self) -> str:
        """What a text widget would insert: characters of KeyPresses without Control/Alt/Super."""
        blocked = X.ControlMask | X.Mod1Mask | X.Mod4Mask
        return "".join(
            e.char for e in self.key_events() if e.char is not None and not e.state & blocked
        )


def _describe(event: RecordedEvent) -> str:
    if event.button is not None:
        return f"{event.kind}(button={event.button} at {event.root_x},{event.root_y})"
    if event.keycode is not None:
        return f"{event.kind}({event.keysym_name or event.keysym} state={event.state:#x})"
    return f"{event.kind}({event.root_x},{event.root_y})"
