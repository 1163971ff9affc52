"""Claude's key text (``computer_toolset_20260801`` ``key``/``hold_key`` and the ``text`` modifier
field of clicks and scrolls) → chords of X keysym names the guest presses (pure).

Claude writes keys the way ``xdotool key`` reads them: ``+`` joins the keys of one chord
(``ctrl+shift+Escape``), whitespace separates chords pressed one after the other
(``ctrl+a ctrl+c``), and a key is an X keysym name or one of xdotool's aliases,
case-insensitive (``Return``, ``return``, ``Page_Down``, ``KP_Enter``, ``super``,
``XF86AudioMute``). A name resolves, in order, through :data:`CLAUDE_KEYS` (the vocabulary
Claude sends, each entry pressed on a real X server by the tests), cubicle's own key
vocabulary (:mod:`cubicle_guest.keys`: ``Enter``, ``Esc``, ``cmd``, ``pgdn``, single
characters) and finally any X keysym name python-xlib knows, matched without case. Anything
else is refused naming the key; nothing is dropped or guessed.

xdotool's ``meta`` is X's ``Meta_L``, a key no stock layout binds; here, as everywhere in cubicle,
the aliases ``meta``/``cmd``/``win``/``super`` are ``Super_L`` (the key a desktop reads as the logo
key). A keysym's own name is that keysym: ``Super_L`` is ``Super_L``, and ``Meta_L``/``Meta_R``/
``Hyper_L``/``Hyper_R`` press exactly those keysyms (cubicle's general vocabulary folds
``Meta_L`` into ``Super_L``; Claude, writing xdotool names, means the keysym it names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from Xlib import XK

from cubicle.drivers.errors import ActionRejected
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import (
    MODIFIER_KEYSYMS,
    PUNCTUATION_KEYSYMS,
    keysym_number,
    resolve_key,
)

__all__ = ["CLAUDE_KEYS", "claude_key", "modifier_keys", "parse_chord", "parse_key_text"]


def _vocabulary() -> dict[str, str]:
    table: dict[str, str] = {}

    def add(keysym: str, *aliases: str) -> None:
        for name in (keysym, *aliases):
            table[name.lower()] = keysym

    # xdotool's own aliases (xdo.c symbol_map), with cubicle's Super for meta
    add("Alt_L", "alt")
    add("Control_L", "ctrl", "control")
    add("Super_L", "super", "meta", "cmd", "win", "windows", "command")
    add("Shift_L", "shift")
    add("Alt_R")
    add("Control_R")
    add("Super_R")
    add("Shift_R")
    add("Meta_L")  # the keysym itself, not cubicle's alias for Super_L (module docstring)
    add("Meta_R")
    add("Hyper_L")
    add("Hyper_R")
    add("ISO_Level3_Shift", "altgr")
    # what the toolset's own documentation names, and their usual spellings
    add("Return", "enter", "ret")
    add("Tab")
    add("ISO_Left_Tab")
    add("Escape", "esc")
    add("BackSpace", "backspace")
    add("Delete", "del")
    add("Insert", "ins")
    add("space", "spacebar")
    add("Up", "arrowup")
    add("Down", "arrowdown")
    add("Left", "arrowleft")
    add("Right", "arrowright")
    add("Home")
    add("End")
    add("Page_Up", "pageup", "pgup", "prior")
    add("Page_Down", "pagedown", "pgdn", "next")
    add("Menu")
    add("Print", "printscreen")
    add("Pause")
    add("Scroll_Lock")
    add("Num_Lock")
    add("Caps_Lock", "capslock")
    for number in range(1, 25):
        add(f"F{number}")
    for digit in range(10):
        add(f"KP_{digit}")
    for name in (
        "KP_Enter",
        "KP_Add",
        "KP_Subtract",
        "KP_Multiply",
        "KP_Divide",
        "KP_Decimal",
        "KP_Home",
        "KP_End",
        "KP_Up",
        "KP_Down",
        "KP_Left",
        "KP_Right",
        "KP_Page_Up",
        "KP_Page_Down",
        "KP_Insert",
        "KP_Delete",
    ):
        add(name)
    for name in (
        "XF86AudioMute",
        "XF86AudioLowerVolume",
        "XF86AudioRaiseVolume",
        "XF86AudioPlay",
        "XF86AudioPause",
        "XF86AudioStop",
        "XF86AudioNext",
        "XF86AudioPrev",
        "XF86MonBrightnessUp",
        "XF86MonBrightnessDown",
        "XF86Back",
        "XF86Forward",
        "XF86Reload",
        "XF86Search",
        "XF86HomePage",
        "XF86Copy",
        "XF86Paste",
        "XF86Cut",
    ):
        add(name)
    for name in PUNCTUATION_KEYSYMS:  # a single character works as itself too
        add(name)
    return table


CLAUDE_KEYS: Final[Mapping[str, str]] = _vocabulary()
"""The key names Claude sends (lower-case) → the X keysym name pressed."""


def _keysyms_by_lower_name() -> dict[str, str]:
    names: dict[str, str] = {}
    for attribute in dir(XK):
        if attribute.startswith("XK_"):
            name = attribute[3:]
            if name.startswith("XF86_"):
                name = "XF86" + name[5:]
            names.setdefault(name.lower(), name)
    return names


_ANY_KEYSYM: Final = _keysyms_by_lower_name()


def claude_key(name: str) -> str:
    """The X keysym name Claude's key ``name`` presses.

    :raises KeyError: ``name`` is no key (the message names it).
    """
    known = CLAUDE_KEYS.get(name.lower())
    if known is not None:
        return known
    try:
        return resolve_key(name).keysym_name
    except GuestError:
        pass
    exact = _ANY_KEYSYM.get(name.lower())
    if exact is not None and keysym_number(exact):
        return exact
    raise KeyError(name)


def parse_chord(member: str, field: str, chord: str) -> list[str]:
    """One ``+``-joined chord → its keysym names (``ctrl++`` is Ctrl and the ``+`` key).

    :raises ActionRejected: an empty chord or an unknown key, naming ``member``, ``field`` and the
        key.
    """
    if chord == "+":
        parts = ["plus"]
    elif chord.endswith("++"):
        parts = [*chord[:-2].split("+"), "plus"]
    else:
        parts = chord.split("+")
    if any(part == "" for part in parts):
        raise ActionRejected(member, f"{field}: {chord!r} has an empty key name between '+'")
    keys = []
    for part in parts:
        try:
            keys.append(claude_key(part))
        except KeyError:
            raise ActionRejected(
                member,
                f"{field}: unknown key {part!r} in {chord!r} (not an X keysym name or an "
                "xdotool alias such as Return, ctrl, Page_Down, KP_Enter, super)",
            ) from None
    return keys


def parse_key_text(
    member: str, field: str, text: str, *, one_chord: bool = False
) -> list[list[str]]:
    """Claude's key ``text`` → the chords to press in order.

    :param one_chord: refuse more than one chord (``hold_key`` and click modifiers hold one).
    :raises ActionRejected: empty text, too many chords, or an unknown key — naming the member,
        the field and the key.
    """
    if not isinstance(text, str):
        raise ActionRejected(member, f"{field} must be a string, got {type(text).__name__}")
    chords = text.split()
    if not chords:
        raise ActionRejected(member, f"{field} is empty; name at least one key")
    if one_chord and len(chords) > 1:
        raise ActionRejected(
            member, f"{field}: {text!r} is {len(chords)} chords; this member takes one"
        )
    return [parse_chord(member, field, chord) for chord in chords]


def modifier_keys(member: str, text: str | None) -> list[str]:
    """The keys a click or scroll holds (its ``text`` field): one chord of modifiers.

    :raises ActionRejected: several chords, an unknown key or a key that is not a modifier.
    """
    if text is None:
        return []
    keys = parse_key_text(member, "text", text, one_chord=True)[0]
    plain = [key for key in keys if key not in MODIFIER_KEYSYMS]
    if plain:
        raise ActionRejected(
            member, f"text: {plain[0]!r} is not a modifier (hold ctrl, shift, alt or super)"
        )
    return keys
