"""Every key name of the vocabulary reaches a real window as the right keysym and modifiers."""

from __future__ import annotations

import string

import pytest
from Xlib import X

from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import KEY_NAMES, char_keysym, is_typing_key, keysym_number, resolve_key
from tests.support.recorder import RecordedEvent, Recorder

pytestmark = pytest.mark.x11

LOCKS = {"Caps_Lock", "Num_Lock", "Scroll_Lock"}


def _press_and_wait(
    client: AgentClient, recorder: Recorder, keys: list[str], releases: int
) -> list[RecordedEvent]:
    client.keypress(keys)
    return recorder.wait_until(
        lambda evs: sum(e.kind == "KeyRelease" for e in evs) >= releases,
        what=f"{releases} key releases for {keys}",
    )


@pytest.mark.parametrize(("name", "canonical"), sorted(KEY_NAMES.items()))
def test_every_key_table_entry_delivers_its_keysym(
    client: AgentClient, recorder: Recorder, name: str, canonical: str
) -> None:
    expected = keysym_number(canonical)
    client.keypress([name])
    if canonical in LOCKS:  # toggle it back off so later tests see a clean state
        client.keypress([name])
    press = recorder.wait_for(
        lambda e: e.kind == "KeyPress" and e.keysym == expected,
        what=f"KeyPress {canonical} for {name!r}",
    )
    recorder.wait_for(
        lambda e: e.kind == "KeyRelease" and e.keycode == press.keycode,
        what=f"KeyRelease {canonical}",
    )
    others = [e.keysym_name for e in recorder.key_events() if e.keycode != press.keycode]
    assert set(others) <= {"Shift_L"}, f"unexpected extra keys {others}"
    if others:  # a shifted keysym: Shift held exactly around it
        assert press.state & X.ShiftMask


@pytest.mark.parametrize("name", [*(f"F{n}" for n in range(1, 25)), "f1", "f12", "f24"])
def test_function_keys_f1_to_f24(client: AgentClient, recorder: Recorder, name: str) -> None:
    expected = keysym_number(name.upper())
    client.keypress([name])
    press = recorder.wait_for(lambda e: e.kind == "KeyPress", what=name)
    assert press.keysym == expected


@pytest.mark.parametrize(
    "char",
    [
        *(string.ascii_letters + string.digits + string.punctuation),
        "é",
        "ß",
        "Ä",
        "€",
        "日",
        "ж",
        "✓",
    ],
)
def test_single_character_keys_are_exact(
    client: AgentClient, recorder: Recorder, char: str
) -> None:
    client.keypress([char])
    events = recorder.wait_until(
        lambda evs: any(e.kind == "KeyRelease" and e.char == char for e in evs), what=repr(char)
    )
    assert "".join(e.char or "" for e in events if e.kind == "KeyPress") == char
    assert recorder.text() == char


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["ctrl", "L"], [("Control_L", 0), ("l", X.ControlMask)]),
        (["CTRL", "c"], [("Control_L", 0), ("c", X.ControlMask)]),
        (["shift", "a"], [("Shift_L", 0), ("A", X.ShiftMask)]),
        (
            ["ctrl", "shift", "T"],
            [("Control_L", 0), ("Shift_L", X.ControlMask), ("T", X.ControlMask | X.ShiftMask)],
        ),
        (["CMD", "space"], [("Super_L", 0), ("space", X.Mod4Mask)]),
        (["Meta", "ArrowUp"], [("Super_L", 0), ("Up", X.Mod4Mask)]),
        (["alt", "F4"], [("Alt_L", 0), ("F4", X.Mod1Mask)]),
        (
            ["ctrl", "alt", "Delete"],
            [("Control_L", 0), ("Alt_L", X.ControlMask), ("Delete", X.ControlMask | X.Mod1Mask)],
        ),
        (["win", "pgdn"], [("Super_L", 0), ("Page_Down", X.Mod4Mask)]),
    ],
)
def test_chords_press_in_order_release_in_reverse(
    client: AgentClient, recorder: Recorder, keys: list[str], expected: list[tuple[str, int]]
) -> None:
    events = _press_and_wait(client, recorder, keys, len(expected))
    relevant = X.ShiftMask | X.ControlMask | X.Mod1Mask | X.Mod4Mask
    presses = [(e.keysym_name, e.state & relevant) for e in events if e.kind == "KeyPress"]
    releases = [e.keysym_name for e in events if e.kind == "KeyRelease"]
    assert presses == expected
    # released in reverse order (a release's keysym is looked up with the state at release)
    press_codes = [e.keycode for e in events if e.kind == "KeyPress"]
    release_codes = [e.keycode for e in events if e.kind == "KeyRelease"]
    assert release_codes == list(reversed(press_codes)), releases


def test_lone_shifted_character_gets_shift(client: AgentClient, recorder: Recorder) -> None:
    events = _press_and_wait(client, recorder, ["A"], 2)
    assert [(e.kind, e.keysym_name) for e in events if e.kind.startswith("Key")] == [
        ("KeyPress", "Shift_L"),
        ("KeyPress", "A"),
        ("KeyRelease", "A"),
        ("KeyRelease", "Shift_L"),
    ]


@pytest.mark.parametrize(
    "keys", [["ctrl", "bogus"], ["Return", "ctrl", "NotAKey"], ["enterr"], ["", "a"], ["ctrl+c"]]
)
def test_unknown_key_is_an_error_naming_it_and_nothing_is_pressed(
    client: AgentClient, recorder: Recorder, keys: list[str]
) -> None:
    with pytest.raises(GuestError) as caught:
        client.keypress(keys)
    assert caught.value.code == "unknown_key"
    bad = next(k for k in keys if k.lower() not in KEY_NAMES and len(k) != 1)
    assert repr(bad) in caught.value.reason
    client.move(3, 3)
    recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 3)
    assert recorder.key_events() == [] and recorder.key_events("KeyRelease") == []


def test_empty_chord_is_rejected(client: AgentClient) -> None:
    with pytest.raises(GuestError) as caught:
        client.keypress([])
    assert caught.value.code == "bad_args"
    assert "empty chord" in caught.value.reason


def test_key_names_are_case_insensitive_but_characters_are_not() -> None:
    assert resolve_key("PAGEDOWN").keysym_name == resolve_key("pagedown").keysym_name == "Page_Down"
    assert resolve_key("ArrowLeft").keysym_name == "Left"
    assert resolve_key("a").keysym == char_keysym("a") != resolve_key("A").keysym
    for alias in ("cmd", "CMD", "meta", "Meta", "win", "super", "command", "SUPER"):
        assert resolve_key(alias).keysym_name == "Super_L"


@pytest.mark.parametrize(
    ("keys", "typing"),
    [
        (["a"], True),
        (["BACKSPACE"], True),
        (["ArrowLeft"], True),
        (["日"], True),
        (["ENTER"], False),
        (["Return"], False),
        (["ESC"], False),
        (["TAB"], False),
        (["CTRL", "S"], False),
        (["SHIFT"], False),
        (["notakey"], False),
    ],
)
def test_typing_keys_are_single_non_commit_keys(keys: list[str], typing: bool) -> None:
    assert is_typing_key(keys) is typing
