"""The key vocabulary: every name a model or a caller may use for a key → one X keysym name.

This is the ONE table of key names (the host drivers validate against it too). Lookups are
case-insensitive for names and exact for single characters (``"a"`` and ``"A"`` differ):

1. :data:`KEY_NAMES` — X keysym names (``Return``, ``Page_Down``, ``BackSpace``), the OpenAI
   sample names (``ENTER``, ``ESC``, ``CTRL``, ``CMD``, ``ARROWLEFT``, ``PAGEDOWN``, ``SPACE``),
   W3C ``KeyboardEvent.key`` names (``ArrowUp``, ``PageDown``, ``Escape``, ``Meta``), pyautogui
   names (``pgdn``, ``win``, ``command``) and ``F1``-``F24``;
2. a single character (``"a"``, ``"<"``, ``"é"``, ``"日"``) stands for itself;
3. any other exact X keysym name python-xlib knows (``Aacute``, ``XF86AudioMute``).

``CMD``/``META``/``WIN``/``SUPER``/``COMMAND`` all mean ``Super_L``. An unknown name raises
:class:`~cubicle_guest.errors.GuestError` ``unknown_key`` naming it; nothing is ever dropped.

Pure python-xlib (for keysym numbers); no X connection needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from Xlib import XK

from cubicle_guest.errors import GuestError

__all__ = [
    "COMMIT_KEYSYMS",
    "KEY_NAMES",
    "MODIFIER_KEYSYMS",
    "PUNCTUATION_KEYSYMS",
    "ChordKey",
    "char_keysym",
    "is_typing_key",
    "keysym_name",
    "keysym_number",
    "resolve_chord",
    "resolve_key",
]

for _group in (
    "miscellany",
    "latin1",
    "latin2",
    "latin3",
    "latin4",
    "greek",
    "xf86",
    "xkb",
    "katakana",
    "arabic",
    "cyrillic",
    "hebrew",
    "thai",
    "korean",
    "technical",
    "special",
    "publishing",
    "apl",
    "currency",
    "latin9",
):
    with contextlib.suppress(ImportError, KeyError):  # a group python-xlib does not ship
        XK.load_keysym_group(_group)


def keysym_number(name: str) -> int:
    """The keysym number of an exact X keysym name, or 0 if python-xlib does not know it.

    Accepts the Xlib spelling ``XF86AudioMute`` as well as python-xlib's ``XF86_AudioMute``.
    """
    number = int(XK.string_to_keysym(name))
    if number == 0 and name.startswith("XF86") and not name.startswith("XF86_"):
        number = int(XK.string_to_keysym("XF86_" + name[4:]))
    return number


PUNCTUATION_KEYSYMS: Final = (
    "minus",
    "plus",
    "equal",
    "comma",
    "period",
    "slash",
    "backslash",
    "semicolon",
    "apostrophe",
    "grave",
    "bracketleft",
    "bracketright",
    "braceleft",
    "braceright",
    "less",
    "greater",
    "question",
    "exclam",
    "at",
    "numbersign",
    "dollar",
    "percent",
    "asciicircum",
    "ampersand",
    "asterisk",
    "parenleft",
    "parenright",
    "underscore",
    "colon",
    "quotedbl",
    "bar",
    "asciitilde",
)
"""The punctuation keys by X keysym name (a single character works as itself too)."""


def _table() -> dict[str, str]:
    table: dict[str, str] = {}

    def add(keysym: str, *aliases: str) -> None:
        for alias in (keysym, *aliases):
            key = alias.lower()
            if key in table and table[key] != keysym:
                raise AssertionError(f"key alias {alias!r} maps to {table[key]} and {keysym}")
            table[key] = keysym

    # editing and whitespace
    add("Return", "enter", "return", "ret", "kp_return")
    add("Tab", "tab")
    add("space", "spacebar")
    add("BackSpace", "backspace", "back_space", "bksp")
    add("Delete", "del", "delete", "forwarddelete")
    add("Insert", "ins", "insert")
    add("Escape", "esc", "escape")
    # navigation
    add("Left", "arrowleft", "left_arrow", "leftarrow")
    add("Right", "arrowright", "right_arrow", "rightarrow")
    add("Up", "arrowup", "up_arrow", "uparrow")
    add("Down", "arrowdown", "down_arrow", "downarrow")
    add("Home", "home")
    add("End", "end")
    add("Page_Up", "pageup", "pgup", "page_up", "prior")
    add("Page_Down", "pagedown", "pgdn", "page_down", "next")
    # modifiers
    add("Shift_L", "shift", "shiftleft", "lshift", "shift_left")
    add("Shift_R", "shiftright", "rshift", "shift_right")
    add(
        "Control_L",
        "ctrl",
        "control",
        "ctrlleft",
        "controlleft",
        "lctrl",
        "ctrl_l",
        "control_left",
        "ctrl_left",
    )
    add("Control_R", "ctrlright", "controlright", "rctrl", "ctrl_r", "control_right", "ctrl_right")
    add("Alt_L", "alt", "altleft", "lalt", "option", "optionleft", "alt_left", "opt")
    add("Alt_R", "altright", "ralt", "optionright", "alt_right")
    add("ISO_Level3_Shift", "altgr", "altgraph")
    add(
        "Super_L",
        "super",
        "cmd",
        "command",
        "meta",
        "win",
        "windows",
        "os",
        "winleft",
        "metaleft",
        "superleft",
        "cmdleft",
        "commandleft",
        "lwin",
        "super_left",
    )
    add(
        "Super_R",
        "winright",
        "metaright",
        "superright",
        "cmdright",
        "commandright",
        "rwin",
        "super_right",
    )
    # X's Meta keysyms are themselves (an exact keysym name is never an alias of another key;
    # ``meta`` alone stays the logo key above)
    add("Meta_L", "meta_l")
    add("Meta_R", "meta_r")
    add("Menu", "menu", "apps", "contextmenu", "application")
    add("Caps_Lock", "capslock", "caps", "caps_lock")
    add("Num_Lock", "numlock", "num_lock")
    add("Scroll_Lock", "scrolllock", "scroll_lock", "scrlk")
    # system and editing commands
    add("Print", "print", "printscreen", "prtsc", "prtscr", "prntscrn", "snapshot")
    add("Clear", "clear")
    add("Help", "help")
    add("Undo", "undo")
    add("Redo", "redo")
    add("Find", "find")
    add("Cancel", "cancel")
    add("Execute", "execute")
    add("Select", "select")
    add("Mode_switch", "modechange")
    # input-method keys (pyautogui and W3C names)
    add("Kanji", "kanji")
    add("Kana_Lock", "kana", "kanamode")
    add("Hangul", "hangul", "hanguel", "hangulmode")
    add("Hangul_Hanja", "hanja", "hanjamode")
    add("Henkan", "convert")
    add("Muhenkan", "nonconvert")
    add("yen")
    add("Pause", "pause", "break")
    add("Sys_Req", "sysreq", "sys_req")
    # keypad
    for digit in range(10):
        add(f"KP_{digit}", f"num{digit}", f"numpad{digit}")
    add("KP_Add", "add", "numpadadd")
    add("KP_Subtract", "subtract", "numpadsubtract")
    add("KP_Multiply", "multiply", "numpadmultiply")
    add("KP_Divide", "divide", "numpaddivide")
    add("KP_Decimal", "decimal", "numpaddecimal")
    add("KP_Enter", "numpadenter")
    add("KP_Separator", "separator")
    # function keys
    for number in range(1, 25):
        add(f"F{number}")
    # media (XF86 keysyms)
    add("XF86AudioMute", "volumemute", "audiovolumemute")
    add("XF86AudioLowerVolume", "volumedown", "audiovolumedown")
    add("XF86AudioRaiseVolume", "volumeup", "audiovolumeup")
    add("XF86AudioPlay", "playpause", "mediaplaypause")
    add("XF86AudioStop", "stop", "mediastop")
    add("XF86AudioNext", "nexttrack", "mediatracknext")
    add("XF86AudioPrev", "prevtrack", "mediatrackprevious")
    add("XF86Back", "browserback")
    add("XF86Forward", "browserforward")
    add("XF86Reload", "browserrefresh")
    add("XF86HomePage", "browserhome")
    add("XF86Search", "browsersearch")
    add("XF86Favorites", "browserfavorites")
    add("XF86Stop", "browserstop")
    add("XF86Mail", "launchmail")
    add("XF86Launch0", "launchapp1")
    add("XF86Launch1", "launchapp2")
    add("XF86AudioMedia", "launchmediaselect")
    add("XF86Sleep", "sleep")
    # named punctuation (X keysym names; single characters work too)
    for name in PUNCTUATION_KEYSYMS:
        add(name)
    return table


KEY_NAMES: Final[Mapping[str, str]] = _table()
"""Lower-cased key name → canonical X keysym name (every alias the vocabulary accepts)."""

_UNKNOWN_CANONICAL = sorted({name for name in KEY_NAMES.values() if keysym_number(name) == 0})
if _UNKNOWN_CANONICAL:  # a typo in the table; fail at import, not at the first keypress
    raise AssertionError(f"key table names unknown keysyms: {_UNKNOWN_CANONICAL}")

MODIFIER_KEYSYMS: Final = frozenset(
    {
        "Shift_L",
        "Shift_R",
        "Control_L",
        "Control_R",
        "Alt_L",
        "Alt_R",
        "Super_L",
        "Super_R",
        "ISO_Level3_Shift",
        "Meta_L",
        "Meta_R",
        "Hyper_L",
        "Hyper_R",
    }
)


def _reverse_names() -> dict[int, str]:
    preferred = set(KEY_NAMES.values())
    names: dict[int, str] = {}
    for attribute, value in vars(XK).items():
        if not attribute.startswith("XK_") or not isinstance(value, int):
            continue
        name = attribute[3:]
        if name.startswith("XF86_"):
            name = "XF86" + name[5:]
        if value not in names or (name in preferred and names[value] not in preferred):
            names[value] = name
    return names


_KEYSYM_NAMES: Final = _reverse_names()


def keysym_name(keysym: int) -> str:
    """The X name of ``keysym`` (``Return``, ``Page_Down``, ``XF86AudioMute``), ``U65E5`` for
    Unicode keysyms without a legacy name, or ``0x...`` if unknown."""
    name = _KEYSYM_NAMES.get(keysym)
    if name is not None:
        return name
    if 0x01000100 <= keysym <= 0x0110FFFF:
        return f"U{keysym - 0x01000000:04X}"
    return f"{keysym:#x}"


_SPECIAL_CHARS: Final[Mapping[str, str]] = {"\n": "Return", "\r": "Return", "\t": "Tab"}


def char_keysym(char: str) -> int:
    """The X keysym that produces ``char`` (one Unicode code point) when typed.

    Latin-1 characters use their legacy keysyms (same number), newline is ``Return``, tab is
    ``Tab``, and everything else uses the Unicode keysym ``0x01000000 + code point`` (as xdotool
    and Xlib's ``XLookupString`` do).
    """
    special = _SPECIAL_CHARS.get(char)
    if special is not None:
        return keysym_number(special)
    code = ord(char)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x01000000 + code


@dataclass(frozen=True)
class ChordKey:
    """One resolved key of a chord: the name the caller used and the keysym to press."""

    name: str
    keysym: int
    keysym_name: str

    @property
    def is_modifier(self) -> bool:
        return self.keysym_name in MODIFIER_KEYSYMS


def resolve_key(name: str) -> ChordKey:
    """Resolve one key name (see the module docstring for the rules).

    :raises GuestError: ``unknown_key`` naming the key.
    """
    if not isinstance(name, str) or name == "":
        raise GuestError(
            "unknown_key",
            f"key name must be a non-empty string, got {name!r}",
            details={"key": name},
        )
    canonical = KEY_NAMES.get(name.lower())
    if canonical is not None:
        return ChordKey(name, keysym_number(canonical), canonical)
    if len(name) == 1:
        keysym = char_keysym(name)
        return ChordKey(name, keysym, keysym_name(keysym))
    keysym = keysym_number(name)
    if keysym:
        return ChordKey(name, keysym, name)
    raise GuestError(
        "unknown_key",
        f"unknown key {name!r}: not an X keysym name, a known alias (Enter, Ctrl, ArrowUp, "
        f"PageDown, pgdn, cmd ...) or a single character",
        details={"key": name},
    )


def resolve_chord(names: Sequence[str]) -> list[ChordKey]:
    """Resolve a whole chord before anything is pressed.

    A lone letter in a chord with a modifier is sent lower-case so Shift is not implied
    (``ctrl+L`` → ``ctrl+l``); add ``shift`` to the chord to mean Shift.

    :raises GuestError: ``bad_args`` for an empty chord, ``unknown_key`` naming the first
        unknown key.
    """
    if len(names) == 0:
        raise GuestError(
            "bad_args", "keypress needs at least one key; got an empty chord", details={"keys": []}
        )
    keys = [resolve_key(name) for name in names]
    if any(key.is_modifier for key in keys):
        keys = [
            resolve_key(key.name.lower())
            if len(key.name) == 1 and key.name.isalpha() and key.name.isupper()
            else key
            for key in keys
        ]
    return keys


COMMIT_KEYSYMS: Final = frozenset({"Return", "KP_Enter", "Escape", "Tab", "ISO_Left_Tab"})
"""Keys that commit, cancel or move focus: they may open or close windows."""


def is_typing_key(names: Sequence[str]) -> bool:
    """True when a ``keypress`` of ``names`` only types: one key, not a modifier, not one of
    :data:`COMMIT_KEYSYMS` (letters, digits, Backspace, Delete, arrows, Home/End...). Unknown
    names are False (the keypress itself reports them)."""
    if len(names) != 1:
        return False
    try:
        key = resolve_key(names[0])
    except GuestError:
        return False
    return not key.is_modifier and key.keysym_name not in COMMIT_KEYSYMS
