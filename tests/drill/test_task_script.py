"""The shipped drill script is valid, fills its placeholders, and types exactly what is verified."""

from __future__ import annotations

import json

from drivers.scripted_model import parse_script
from orchestrator.drill.task import EXPECTED_FORM, EXPECTED_NOTE, DrillPaths, load_script

PATHS = DrillPaths(workdir="/home/cubicle/drill-x", port=8765)


def _typed(script: dict[str, object]) -> list[str]:
    texts: list[str] = []
    for turn in script["turns"]:  # type: ignore[attr-defined]
        for action in (turn.get("computer_call") or {}).get("actions", []):
            if action["type"] == "type":
                texts.append(action["text"])
    return texts


def test_script_parses_with_the_scripted_models_own_validator() -> None:
    script = parse_script(load_script(PATHS))
    assert script.turns[-1].message
    assert any(turn.safety_checks for turn in script.turns), "one step must carry a safety check"


def test_placeholders_are_all_filled() -> None:
    text = json.dumps(load_script(PATHS), ensure_ascii=False)
    for token in ("{WORKDIR}", "{PORT}", "{PROFILE}"):
        assert token not in text
    assert "/home/cubicle/drill-x/note.txt" in text
    assert "http://127.0.0.1:8765/" in text


def test_the_script_types_exactly_the_expected_note_and_form() -> None:
    typed = _typed(load_script(PATHS))
    assert EXPECTED_NOTE in typed
    assert EXPECTED_FORM["name"] in typed
    assert EXPECTED_FORM["city"] in typed
    assert PATHS.note in typed


def test_expected_texts_cover_accents_cjk_symbols_and_newlines() -> None:
    for needle in ("ê", "日本語", "✓", "<", "&", "%", "\n"):
        assert needle in EXPECTED_NOTE
