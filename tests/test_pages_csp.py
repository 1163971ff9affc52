"""No test or benchmark opens cubicle's pages with their Content-Security-Policy turned off, and
every browser context of theirs comes from :func:`tests.support.pages.new_context` (which records
``securitypolicyviolation`` events before the page's scripts run)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "scripts", "cubicle")
ALLOWED = {Path("tests/support/pages.py"), Path("tests/test_pages_csp.py")}

FORBIDDEN = re.compile(
    r"bypass_csp\s*=\s*True|[\"']bypass_csp[\"']\s*:\s*True|bypassCSP|setBypassCSP"
    r"|disable-web-security|\bbrowser\.new_(?:context|page)\("
)
"""CSP switched off (Playwright's option, the CDP call, Chromium's flag), or a context made
without the violation probe."""


def offences(root: Path, folders: tuple[str, ...] = SCANNED) -> list[str]:
    """``path:line: text`` of each forbidden use under ``root``'s ``folders``."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in {".py", ".js", ".sh", ""} or not path.is_file():
                continue
            relative = path.relative_to(root)
            if relative in ALLOWED or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for number, line in enumerate(text.splitlines(), 1):
                if FORBIDDEN.search(line):
                    found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_no_page_is_opened_with_its_csp_bypassed() -> None:
    assert offences(REPO) == []


def test_the_check_finds_a_planted_bypass(tmp_path: Path) -> None:
    planted = tmp_path / "tests" / "view"
    planted.mkdir(parents=True)
    (planted / "test_x.py").write_text(
        "ok = 1\n"
        "ctx = browser.new_context(viewport=v, bypass_csp=True)\n"
        "ctx = b.new_context(**{'bypass_csp': True})\n"
        "cdp.send('Page.setBypassCSP', {'enabled': True})\n"
    )
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "open").write_text("chromium --disable-web-security URL\n")
    assert offences(tmp_path, ("tests", "scripts")) == [
        "tests/view/test_x.py:2: ctx = browser.new_context(viewport=v, bypass_csp=True)",
        "tests/view/test_x.py:3: ctx = b.new_context(**{'bypass_csp': True})",
        "tests/view/test_x.py:4: cdp.send('Page.setBypassCSP', {'enabled': True})",
        "scripts/open:1: chromium --disable-web-security URL",
    ]
