"""A ``cubicle`` command starts without loading the Claude and Gemini client packages (anthropic,
google-genai: seconds of CPU at every start, paid by each CLI and ``cubicle serve`` process);
they load where their loop runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.genai import types

from cubicle.drivers.gemini_actions import BROWSER_ONLY, computer_use_tool

REPO = Path(__file__).resolve().parents[1]


def test_the_cli_starts_without_the_claude_and_gemini_clients() -> None:
    probe = (
        "import sys, cubicle.orchestrator.cli; "
        "print(sorted(m for m in ('anthropic', 'google.genai') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_gemini_tool_entry_still_builds_the_sdks_type() -> None:
    tool = computer_use_tool()
    assert isinstance(tool, types.Tool) and tool.computer_use is not None
    assert tool.computer_use.excluded_predefined_functions == list(BROWSER_ONLY)
