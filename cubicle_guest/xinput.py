"""Pointer and keyboard actions through the X11 XTEST extension (python-xlib).

:class:`XInput` owns one X connection. Every public method takes the instance lock, so X actions
from concurrent protocol connections are serialized. Coordinates are X screen pixels of screen 0
(origin top-left). Keys and buttons an action presses are always released before it returns,
even when it fails midway; :meth:`XInput.release_all` releases anything still held.

Typing any Unicode text on any layout: a character whose keysym the current keyboard mapping
lacks (at the plain or Shift level) is bound to a *spare* keycode (one with no keysyms at
start-up), as xdotool does. Bindings are kept in a small LRU instead of being reverted after each
character, because a client resolves a key event with the mapping current when *it* reads the
event; reverting immediately would race it. Every keysym a request needs is bound before its
first key is sent, followed by a short pause when anything was bound, because Xlib/XKB clients
(Tk, for one) take a new mapping lazily. Text needing more spares than exist is typed in chunks
with a grace period between them (see :data:`_EVICT_GRACE_S`; it is time-based, so a client
stalled for longer than that could still misread a re-bound key). :meth:`XInput.close` restores
the spare keycodes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise
from typing import Any, Final, TypeVar

from Xlib import XK, X, display, error
from Xlib.ext import xtest

from cubicle_guest import protocol
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import ChordKey, char_keysym, resolve_chord

__all__ = ["DRAG_HOLD_S", "DRAG_MAX_STEPS", "DRAG_STEP_PX", "DRAG_STEP_S", "XInput", "drag_steps"]

log = logging.getLogger("cubicle_guest.xinput")
T = TypeVar("T")

_SHIFT_KEYSYM: Final = int(XK.string_to_keysym("Shift_L"))
_EVICT_GRACE_S: Final = 0.1
"""Before re-binding spare keycodes already typed with in the same request (text with more
distinct unmapped characters than there are spares), give clients this long to read the events
that used the old bindings (they resolve keycodes when they read them, not when they are sent)."""
_BIND_SETTLE_S: Final = 0.03
"""After binding spare keycodes and before typing with them, give clients this long to take the
new mapping (Xlib/XKB clients such as Tk refresh their keymap lazily and can otherwise resolve
the next key event with the previous binding)."""


DRAG_STEP_PX: Final = 16
"""A drag moves the pointer at most this many pixels (along each axis) per motion event."""
DRAG_STEP_S: Final = 0.008
"""Pause after each motion event of a drag."""
DRAG_HOLD_S: Final = 0.05
"""Pause after a drag's press and before its release."""
DRAG_MAX_STEPS: Final = 40
"""At most this many motion events between two points of a drag's path (longer segments take
longer steps): a drag across a 1920-pixel screen takes about half a second."""


def drag_steps(path: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The points a drag along ``path`` moves through: every point of ``path``, in order, and
    between two of them evenly spaced points at most :data:`DRAG_STEP_PX` apart on each axis
    (at most :data:`DRAG_MAX_STEPS` per segment). Repeated points are kept (a rest there)."""
    points = [path[0]]
    for (x0, y0), (x1, y1) in pairwise(path):
        longest = max(abs(x1 - x0), abs(y1 - y0))
        count = min(DRAG_MAX_STEPS, max(1, -(-longest // DRAG_STEP_PX)))
        points.extend(
            (x0 + round((x1 - x0) * i / count), y0 + round((y1 - y0) * i / count))
            for i in range(1, count + 1)
        )
    return points


def _shift_selects_level_two(base_keysym: int) -> bool:
    """Whether Shift reaches the second keysym of a key whose first keysym is ``base_keysym``.

    True for printable keys and the keypad. False for function keys such as Print (Sys_Req) and
    Pause (Break), whose XKB types select the second level with Alt or Control instead; a keysym
    found only there is typed through a spare keycode.
    """
    return base_keysym < 0xFF00 or 0xFF80 <= base_keysym <= 0xFFBD


class XInput:
    """XTEST input on one X display.

    :param display_name: X display (``":0"``); ``None`` uses ``$DISPLAY``.
    :raises GuestError: ``x11_error`` if the display cannot be opened or lacks XTEST.
    """

    def __init__(self, display_name: str | None = None) -> None:
        try:
            self._display = display.Display(display_name)
        except (error.DisplayError, error.ConnectionClosedError, OSError) as exc:
            raise GuestError("x11_error", f"cannot open X display {display_name!r}: {exc}") from exc
        if not self._display.has_extension("XTEST"):
            self._display.close()
            raise GuestError("x11_error", f"X display {display_name!r} has no XTEST extension")
        self.display_name = self._display.get_display_name()
        screen = self._display.screen()
        self._root = screen.root
        self.width = int(screen.width_in_pixels)
        self.height = int(screen.height_in_pixels)
        self._lock = threading.RLock()
        self._held_keys: list[tuple[int, str]] = []  # (keycode, name) in press order
        self._held_buttons: list[int] = []
        self._scroll_carry = {"x": 0, "y": 0}
        info = self._display.display.info
        self._min_keycode = int(info.min_keycode)
        self._max_keycode = int(info.max_keycode)
        self._keysym_index: dict[int, tuple[int, int]] = {}
        self._load_keymap()
        self._spares: list[int] = self._find_spare_keycodes()
        self._bound: OrderedDict[int, int] = OrderedDict()  # keysym -> spare keycode, LRU order
        self.keysyms_remapped = 0
        log.info(
            "XTEST input on %s: %dx%d, %d spare keycodes",
            self.display_name,
            self.width,
            self.height,
            len(self._spares),
        )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Release held keys/buttons, restore the spare keycodes, close the connection."""
        with self._lock:
            try:
                self._release_everything()
                for keycode in self._bound.values():
                    self._display.change_keyboard_mapping(keycode, [(X.NoSymbol,)])
                self._bound.clear()
                self._display.sync()
            except (error.ConnectionClosedError, OSError):
                pass
            self._display.close()

    @property
    def screen_size(self) -> dict[str, int]:
        return {"width": self.width, "height": self.height}

    # -- pointer actions ------------------------------------------------------------------

    def click(
        self, x: int, y: int, button: str = "left", keys: Sequence[str] = (), count: int = 1
    ) -> None:
        """Click ``button`` ``count`` times (1..3, one burst: 3 is a triple click) at (x, y)."""
        number = self._button(button)
        self._check_point(x, y)
        if not 1 <= count <= 3:
            raise GuestError(
                "bad_args", f"click count must be 1..3, got {count}", details={"count": count}
            )
        chord = resolve_chord(keys) if keys else []
        with self._lock, self._x_errors("click"), self._holding(chord):
            self._motion(x, y)
            for _ in range(count):
                self._click_button(number)
            self._display.sync()

    def double_click(self, x: int, y: int, keys: Sequence[str] = ()) -> None:
        self._check_point(x, y)
        chord = resolve_chord(keys) if keys else []
        with self._lock, self._x_errors("double_click"), self._holding(chord):
            self._motion(x, y)
            for _ in range(2):
                self._click_button(1)
            self._display.sync()

    def move(self, x: int, y: int, keys: Sequence[str] = ()) -> None:
        self._check_point(x, y)
        chord = resolve_chord(keys) if keys else []
        with self._lock, self._x_errors("move"), self._holding(chord):
            self._motion(x, y)
            self._display.sync()

    def drag(self, path: Sequence[tuple[int, int]], keys: Sequence[str] = ()) -> None:
        """Press the left button at ``path[0]``, move through each point, release at the last.

        Paced as a hand drags (:func:`drag_steps`): between two points of ``path`` the pointer
        moves in steps of at most :data:`DRAG_STEP_PX`, :data:`DRAG_STEP_S` apart, and it rests
        :data:`DRAG_HOLD_S` after the press and before the release. Toolkit drag-and-drop needs
        it (GTK's, in Thunar: the drag starts on a motion past a threshold, and the drop target
        answers the source's position messages through the X server; a two-point path sent at
        once was released before any answer, and nothing was dropped).
        """
        if len(path) < 2:
            raise GuestError(
                "bad_args",
                f"drag needs a path of at least 2 points, got {len(path)}",
                details={"points": len(path)},
            )
        for x, y in path:
            self._check_point(x, y)
        chord = resolve_chord(keys) if keys else []
        with self._lock, self._x_errors("drag"), self._holding(chord):
            self._motion(*path[0])
            self._press_button(1)
            try:
                self._display.sync()
                time.sleep(DRAG_HOLD_S)
                for x, y in drag_steps(path)[1:]:
                    self._motion(x, y)
                    self._display.sync()  # let clients see each step as its own motion
                    time.sleep(DRAG_STEP_S)
                time.sleep(DRAG_HOLD_S)
            finally:
                self._release_button(1)
            self._display.sync()

    def scroll(
        self, x: int, y: int, scroll_x: int, scroll_y: int, keys: Sequence[str] = ()
    ) -> dict[str, int]:
        """Scroll by pixels at (x, y): positive ``scroll_y`` is down, positive ``scroll_x`` right.

        Pixels become wheel clicks (buttons 4/5 vertical, 6/7 horizontal) of
        :data:`protocol.SCROLL_PIXELS_PER_CLICK`; the remainder is carried per axis to the next
        scroll. Returns ``clicks_x``/``clicks_y`` (signed) actually sent.
        """
        self._check_point(x, y)
        chord = resolve_chord(keys) if keys else []
        with self._lock, self._x_errors("scroll"), self._holding(chord):
            clicks = {}
            for axis, amount in (("x", scroll_x), ("y", scroll_y)):
                total = self._scroll_carry[axis] + amount
                count = abs(total) // protocol.SCROLL_PIXELS_PER_CLICK * (1 if total >= 0 else -1)
                self._scroll_carry[axis] = total - count * protocol.SCROLL_PIXELS_PER_CLICK
                clicks[axis] = count
            self._motion(x, y)
            for axis, negative, positive in (("y", 4, 5), ("x", 6, 7)):
                button = positive if clicks[axis] > 0 else negative
                for _ in range(abs(clicks[axis])):
                    self._click_button(button)
            self._display.sync()
            return {"clicks_x": clicks["x"], "clicks_y": clicks["y"]}

    def mouse_down(self, button: str = "left") -> None:
        """Press ``button`` where the pointer is and keep it pressed (until :meth:`mouse_up` or
        :meth:`release_all`); pressing a button already down is refused."""
        number = self._button(button)
        with self._lock, self._x_errors("mouse_down"):
            if number in self._held_buttons:
                raise GuestError(
                    "bad_args", f"button {button!r} is already down", details={"button": button}
                )
            self._press_button(number)
            self._display.sync()

    def mouse_up(self, button: str = "left") -> None:
        """Release ``button`` (one :meth:`mouse_down` pressed; refused when it is not down)."""
        number = self._button(button)
        with self._lock, self._x_errors("mouse_up"):
            if number not in self._held_buttons:
                raise GuestError(
                    "bad_args", f"button {button!r} is not down", details={"button": button}
                )
            self._release_button(number)
            self._display.sync()

    def pointer(self) -> dict[str, int]:
        """Where the pointer is, native pixels."""
        with self._lock, self._x_errors("pointer"):
            reply = self._root.query_pointer()
            return {"x": int(reply.root_x), "y": int(reply.root_y)}

    # -- keyboard actions -----------------------------------------------------------------

    def hold_keys(self, keys: Sequence[str], ms: int) -> None:
        """Press a chord in order, hold it ``ms`` milliseconds, release it in reverse (the release
        is sent even when the hold fails). Validated before pressing."""
        if not 0 <= ms <= protocol.MAX_WAIT_MS:
            raise GuestError(
                "bad_args",
                f"hold_keys ms must be 0..{protocol.MAX_WAIT_MS}, got {ms}",
                details={"ms": ms, "limit": protocol.MAX_WAIT_MS},
            )
        chord = resolve_chord(keys)
        with self._lock, self._x_errors("hold_keys"):
            self._refresh_if_remapped()
            used: set[int] = set()
            self._bind_all([key.keysym for key in chord], used)
            with self._holding(chord):
                self._display.sync()
                time.sleep(ms / 1000)

    def keypress(self, keys: Sequence[str]) -> None:
        """Press a chord in order and release it in reverse (validated before pressing)."""
        chord = resolve_chord(keys)
        with self._lock, self._x_errors("keypress"):
            self._refresh_if_remapped()
            used: set[int] = set()
            self._bind_all([key.keysym for key in chord], used)
            codes = [(self._keycode_for(key.keysym, used), key) for key in chord]
            needs_shift = any(level == 1 for (_, level), _ in codes) and not any(
                key.keysym_name in ("Shift_L", "Shift_R") for key in chord
            )
            pressed: list[tuple[int, str]] = []
            try:
                if needs_shift:
                    shift = self._keycode_for(_SHIFT_KEYSYM, used)[0]
                    self._press_key(shift, "Shift_L")
                    pressed.append((shift, "Shift_L"))
                for (keycode, _), key in codes:
                    self._press_key(keycode, key.keysym_name)
                    pressed.append((keycode, key.keysym_name))
            finally:
                for keycode, name in reversed(pressed):
                    self._release_key(keycode, name)
                self._display.sync()

    def type_text(self, text: str) -> None:
        """Type ``text`` exactly (any Unicode; ``\\n`` is Return, ``\\t`` is Tab)."""
        if len(text) > protocol.MAX_TEXT_CHARS:
            raise GuestError(
                "too_large",
                f"text is {len(text)} characters, over the limit of {protocol.MAX_TEXT_CHARS}",
                details={"limit": protocol.MAX_TEXT_CHARS, "length": len(text)},
            )
        with self._lock, self._x_errors("type"):
            self._refresh_if_remapped()
            used: set[int] = set()
            shift = self._keycode_for(_SHIFT_KEYSYM, used)[0]
            caps = self._caps_lock_if_on()
            if caps is not None:  # Caps Lock would invert letter case: off while typing
                self._tap(caps, "Caps_Lock")
            try:
                for number, chunk in enumerate(self._chunks([char_keysym(c) for c in text])):
                    if number:  # the next chunk re-binds keycodes the previous one typed with
                        self._display.sync()
                        time.sleep(_EVICT_GRACE_S)
                    used = set()
                    self._bind_all(chunk, used)
                    for index, keysym in enumerate(chunk):
                        keycode, level = self._keycode_for(keysym, used)
                        if level == 1:
                            self._press_key(shift, "Shift_L")
                        try:
                            self._tap(keycode, "text")
                        finally:
                            if level == 1:
                                self._release_key(shift, "Shift_L")
                        if index % 64 == 63:
                            self._display.sync()  # bound the X output buffer and server queue
            finally:
                if caps is not None:
                    self._tap(caps, "Caps_Lock")
                self._display.sync()

    def _caps_lock_if_on(self) -> int | None:
        """The Caps_Lock keycode if the Lock modifier is active now, else None."""
        if not int(self._root.query_pointer().mask) & X.LockMask:
            return None
        found = self._keysym_index.get(int(XK.string_to_keysym("Caps_Lock")))
        return found[0] if found is not None else None

    def _tap(self, keycode: int, name: str) -> None:
        try:
            self._press_key(keycode, name)
        finally:
            self._release_key(keycode, name)

    def release_all(self) -> list[str]:
        """Release every key and button still held (ours, and any the server reports down)."""
        with self._lock, self._x_errors("release_all"):
            return self._release_everything()

    def with_display(self, query: Callable[[display.Display], T]) -> T:
        """Run a read-only ``query`` on this connection, serialized with the actions."""
        with self._lock, self._x_errors("query"):
            return query(self._display)

    # -- internals: validation ------------------------------------------------------------

    def _check_point(self, x: int, y: int) -> None:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise GuestError(
                "out_of_bounds",
                f"point ({x}, {y}) is outside the screen {self.width}x{self.height} "
                f"(valid x 0..{self.width - 1}, y 0..{self.height - 1})",
                details={"x": x, "y": y, "width": self.width, "height": self.height},
            )

    @staticmethod
    def _button(name: str) -> int:
        number = protocol.BUTTONS.get(name)
        if number is None:
            raise GuestError(
                "unknown_button",
                f"unknown button {name!r}; known: {', '.join(protocol.BUTTONS)}",
                details={"button": name},
            )
        return number

    # -- internals: X primitives ----------------------------------------------------------

    @contextmanager
    def _x_errors(self, op: str) -> Iterator[None]:
        try:
            yield
        except (error.ConnectionClosedError, error.XError, OSError) as exc:
            raise GuestError(
                "x11_error", f"X server {self.display_name} failed {op}: {exc}", op=op
            ) from exc

    @contextmanager
    def _holding(self, chord: list[ChordKey]) -> Iterator[None]:
        """Hold ``chord`` (already validated) for the body; release in reverse afterwards."""
        if not chord:
            yield
            return
        pressed: list[tuple[int, str]] = []
        used: set[int] = set()
        try:
            for key in chord:
                keycode, _ = self._keycode_for(key.keysym, used)
                self._press_key(keycode, key.keysym_name)
                pressed.append((keycode, key.keysym_name))
            yield
        finally:
            for keycode, name in reversed(pressed):
                self._release_key(keycode, name)
            self._display.sync()

    def _motion(self, x: int, y: int) -> None:
        xtest.fake_input(self._display, X.MotionNotify, x=x, y=y, root=self._root)

    def _click_button(self, button: int) -> None:
        """Press and release ``button``; the release is sent even if the press failed."""
        try:
            self._press_button(button)
        finally:
            self._release_button(button)

    def _press_button(self, button: int) -> None:
        xtest.fake_input(self._display, X.ButtonPress, button)
        self._held_buttons.append(button)

    def _release_button(self, button: int) -> None:
        xtest.fake_input(self._display, X.ButtonRelease, button)
        if button in self._held_buttons:
            self._held_buttons.remove(button)

    def _press_key(self, keycode: int, name: str) -> None:
        xtest.fake_input(self._display, X.KeyPress, keycode)
        self._held_keys.append((keycode, name))

    def _release_key(self, keycode: int, name: str) -> None:
        xtest.fake_input(self._display, X.KeyRelease, keycode)
        for index in range(len(self._held_keys) - 1, -1, -1):
            if self._held_keys[index][0] == keycode:
                del self._held_keys[index]
                break

    def _release_everything(self) -> list[str]:
        released: list[str] = []
        for keycode, name in reversed(self._held_keys):
            xtest.fake_input(self._display, X.KeyRelease, keycode)
            released.append(name)
        for button in reversed(self._held_buttons):
            xtest.fake_input(self._display, X.ButtonRelease, button)
            released.append(f"button{button}")
        ours = {keycode for keycode, _ in self._held_keys}
        self._held_keys.clear()
        self._held_buttons.clear()
        keymap = self._display.query_keymap()
        for byte_index, byte in enumerate(keymap):
            for bit in range(8):
                keycode = byte_index * 8 + bit
                if byte & (1 << bit) and keycode not in ours:
                    xtest.fake_input(self._display, X.KeyRelease, keycode)
                    released.append(f"keycode{keycode}")
        mask = int(self._display.screen().root.query_pointer().mask)
        for button in range(1, 6):
            if mask & (X.Button1Mask << (button - 1)):
                xtest.fake_input(self._display, X.ButtonRelease, button)
                released.append(f"button{button}")
        self._display.sync()
        if released:
            log.info("release_all released %d held keys/buttons", len(released))
        return released

    # -- internals: keyboard mapping ------------------------------------------------------

    def _load_keymap(self) -> None:
        """Index the current mapping: keysym → (keycode, level) at the plain/Shift levels."""
        count = self._max_keycode - self._min_keycode + 1
        mapping: list[Any] = self._display.get_keyboard_mapping(self._min_keycode, count)
        index: dict[int, tuple[int, int]] = {}
        self._mapping = {
            self._min_keycode + offset: list(syms) for offset, syms in enumerate(mapping)
        }
        for level in (0, 1):
            for keycode, syms in self._mapping.items():
                if level < len(syms) and syms[level]:
                    if level == 1 and not _shift_selects_level_two(int(syms[0])):
                        continue
                    index.setdefault(int(syms[level]), (keycode, level))
        self._keysym_index = index

    def _find_spare_keycodes(self) -> list[int]:
        spares = [keycode for keycode, syms in self._mapping.items() if not any(syms)]
        spares.reverse()  # prefer high keycodes, far from the ones real keyboards send
        if not spares:
            # no free keycode: borrow the highest ones (as xdotool's scratch keycode does)
            spares = list(range(self._max_keycode, self._max_keycode - 4, -1))
        return spares

    def _refresh_if_remapped(self) -> None:
        """Re-read the mapping if some client changed it (MappingNotify in our queue)."""
        changed = False
        while self._display.pending_events():
            event = self._display.next_event()
            if event.type == X.MappingNotify and event.request == X.MappingKeyboard:
                changed = True
        if changed:
            self._load_keymap()
            for keysym, keycode in list(self._bound.items()):
                if self._mapping.get(keycode, [0])[0] != keysym:
                    del self._bound[keysym]

    def _needs_spare(self, keysym: int) -> bool:
        return keysym in self._bound or keysym not in self._keysym_index

    def _chunks(self, keysyms: list[int]) -> Iterator[list[int]]:
        """Split ``keysyms`` so no piece needs more spare keycodes than there are."""
        start, needed = 0, set[int]()
        for index, keysym in enumerate(keysyms):
            if self._needs_spare(keysym) and keysym not in needed:
                if len(needed) == len(self._spares):
                    yield keysyms[start:index]
                    start, needed = index, set()
                needed.add(keysym)
        yield keysyms[start:]

    def _bind_all(self, keysyms: list[int], used: set[int]) -> None:
        """Bind every keysym of ``keysyms`` the layout lacks before the first key is sent; if
        anything was bound, give clients :data:`_BIND_SETTLE_S` to take the new mapping."""
        spare = [k for k in dict.fromkeys(keysyms) if self._needs_spare(k)]
        for keysym in spare:  # keep the ones already bound from being evicted by the others
            if keysym in self._bound:
                self._bound.move_to_end(keysym)
        before = self.keysyms_remapped
        for keysym in spare:
            self._keycode_for(keysym, used)
        if self.keysyms_remapped != before:
            self._display.sync()
            time.sleep(_BIND_SETTLE_S)

    def _keycode_for(self, keysym: int, used: set[int]) -> tuple[int, int]:
        """The (keycode, level 0|1) producing ``keysym``, binding a spare keycode if needed.

        ``used`` collects the spare keycodes this request has sent, so that re-binding one of
        them first gives clients time to read the earlier events.
        """
        bound = self._bound.get(keysym)
        if bound is not None:
            self._bound.move_to_end(keysym)
            used.add(bound)
            return bound, 0
        found = self._keysym_index.get(keysym)
        if found is not None:
            return found
        if len(self._bound) < len(self._spares):
            taken = set(self._bound.values())
            keycode = next(code for code in self._spares if code not in taken)
        else:
            old_keysym, keycode = self._bound.popitem(last=False)
            if keycode in used:
                self._display.sync()
                time.sleep(_EVICT_GRACE_S)
            log.debug("re-binding spare keycode %d", keycode)
            del old_keysym
        self._display.change_keyboard_mapping(keycode, [(keysym, keysym)])
        self._display.sync()
        for stale in [sym for sym, (code, _) in self._keysym_index.items() if code == keycode]:
            del self._keysym_index[stale]
        self._bound[keysym] = keycode
        self.keysyms_remapped += 1
        used.add(keycode)
        return keycode, 0
