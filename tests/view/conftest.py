"""Fixtures of the live-view tests: Docker sandboxes (the orchestrator tests' tracker), a private
view folder per test, and Debian's chromium driven headless through Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from orchestrator.view.state import DIR_ENV
from tests.orchestrator.conftest import cli, engine, provider, sandboxes

__all__ = ["browser", "cli", "engine", "page", "provider", "sandboxes", "view_dir"]

CHROMIUM = "/usr/bin/chromium"
SCREEN = (1280, 800)


@pytest.fixture(autouse=True)
def view_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """View state files and logs of this test (inherited by the servers it starts)."""
    folder = tmp_path / "view"
    monkeypatch.setenv(DIR_ENV, str(folder))
    return folder


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) whose viewport shows the desktop 1:1 below the bar;
    the page's CSP is bypassed so Playwright can evaluate its probes."""
    context = browser.new_context(
        viewport={"width": SCREEN[0], "height": SCREEN[1] + 100}, bypass_csp=True
    )
    page = context.new_page()
    yield page
    context.close()
