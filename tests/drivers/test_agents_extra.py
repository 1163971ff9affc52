"""The ``agents`` extra stays optional: only :mod:`cubicle.drivers.agents_computer` imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_base_packages_never_import_the_agents_sdk() -> None:
    done = _python(
        "import sys\n"
        "import cubicle.drivers, cubicle.drivers.scripted_model\n"
        "import cubicle.orchestrator.cli, cubicle.orchestrator.run_task\n"
        "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_extra_the_computer_module_says_what_to_install() -> None:
    done = _python(
        "import sys\n"
        "sys.modules['agents'] = None  # as if openai-agents were not installed\n"
        "from cubicle_guest.errors import CubicleError\n"
        "try:\n"
        "    import cubicle.drivers.agents_computer\n"
        "except CubicleError as exc:\n"
        "    assert isinstance(exc, ImportError), type(exc).__mro__\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'cubicle[agents]'" in done.stdout
