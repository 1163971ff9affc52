"""What the drill asks for and what it must find afterwards.

The expected results live here, apart from the scripted model's script
(``scripts/desktop_drill.json``), so a script that types something else fails verification
instead of redefining success. :func:`load_script` fills the script's placeholders for one drill
run: ``{WORKDIR}`` (a guest folder the drill owns), ``{PORT}`` (the form server's loopback port)
and ``{PROFILE}`` (a fresh chromium profile folder).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

__all__ = [
    "EXPECTED_FORM",
    "EXPECTED_NOTE",
    "TASK_PROMPT",
    "DrillPaths",
    "load_script",
    "script_template",
]

TASK_PROMPT: Final = (
    "Open the text editor, write the note, save it as note.txt in the drill folder, then open "
    "the visitor book in the browser, fill in the name and the city, and save the form."
)
EXPECTED_NOTE: Final = "Grêmio — 日本語 ✓ <tag> & 100%\nsecond line: naïve café\n"
"""Exact text of the saved note (UTF-8 bytes are compared)."""
EXPECTED_FORM: Final = {
    "name": "Zoë Ångström-Łukasiewicz",
    "city": "東京 — São Paulo <b>&</b> 100%",
}
"""Exactly what the form server must have stored."""

SCRIPT_RESOURCE: Final = "desktop_drill.json"


@dataclass(frozen=True)
class DrillPaths:
    """Where one drill run keeps its files in the guest (absolute guest paths)."""

    workdir: str
    port: int

    @property
    def note(self) -> str:
        return f"{self.workdir}/note.txt"

    @property
    def form_data(self) -> str:
        return f"{self.workdir}/form-data.json"

    @property
    def layout(self) -> str:
        return f"{self.workdir}/layout.json"

    @property
    def profile(self) -> str:
        return f"{self.workdir}/chromium-profile"

    @property
    def log(self) -> str:
        return f"{self.workdir}/apps.log"


def script_template() -> dict[str, Any]:
    """The drill script as shipped, placeholders unfilled (a fresh copy each call)."""
    text = (
        resources.files("orchestrator.drill.scripts").joinpath(SCRIPT_RESOURCE).read_text("utf-8")
    )
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{SCRIPT_RESOURCE} must hold a JSON object, got {type(value).__name__}")
    return value


def _fill(value: Any, replacements: dict[str, str]) -> Any:
    if isinstance(value, str):
        for token, text in replacements.items():
            value = value.replace(token, text)
        return value
    if isinstance(value, list):
        return [_fill(item, replacements) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, replacements) for key, item in value.items()}
    return value


def load_script(paths: DrillPaths, template: dict[str, Any] | None = None) -> dict[str, Any]:
    """The script for one run: ``template`` (default: the shipped one) with placeholders filled."""
    source = copy.deepcopy(template if template is not None else script_template())
    replacements = {
        "{WORKDIR}": paths.workdir,
        "{PORT}": str(paths.port),
        "{PROFILE}": paths.profile,
    }
    filled = _fill(source, replacements)
    assert isinstance(filled, dict)
    return filled
