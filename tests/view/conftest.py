"""Fixtures of the live-view tests: Docker sandboxes (the orchestrator tests' tracker), a private
view folder per test, and Debian's chromium driven headless through Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view_servers import DIR_ENV
from tests.orchestrator.conftest import Tracker, cli, engine, provider, sandboxes
from tests.support.pages import CHROMIUM, assert_no_csp_violations, new_context
from tests.view.guest_recorder import GuestRecorder

__all__ = [
    "browser",
    "cli",
    "engine",
    "page",
    "provider",
    "recorder",
    "sandbox",
    "sandboxes",
    "view_dir",
]

SCREEN = (1280, 800)
LEFT_HALF = (0, 0, 640, 800)
"""The guest recorder's window: the left half (white), the desktop's background on the right."""


@pytest.fixture(autouse=True)
def view_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """View state files and logs of this test (inherited by the servers it starts)."""
    folder = tmp_path / "view"
    monkeypatch.setenv(DIR_ENV, str(folder))
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one test module. Not session-wide: Playwright's sync API keeps an event
    loop running in the main thread while it is open, which would break later tests that run
    their own (``anyio.run``)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies) whose viewport shows the desktop 1:1 below the bar,
    with the page's CSP enforced as in a person's browser; the test fails on any violation."""
    context = new_context(browser, viewport={"width": SCREEN[0], "height": SCREEN[1] + 100})
    page = context.new_page()
    yield page
    try:
        if page.url.startswith("http"):
            assert_no_csp_violations(page)
    finally:
        context.close()


@pytest.fixture
def sandbox(sandboxes: Tracker) -> Sandbox:
    return sandboxes.create()


@pytest.fixture
def recorder(provider: DockerProvider, sandbox: Sandbox) -> Iterator[GuestRecorder]:
    """Input events the guest's X server delivers to a window on the left half of the screen."""
    with GuestRecorder(provider, sandbox.id, geometry=LEFT_HALF) as rec:
        yield rec
