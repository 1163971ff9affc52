"""cubicle's pages (the live view, serve's console, report.html) in Chromium as a person's
browser opens them: the page's Content-Security-Policy enforced, never bypassed.

:func:`new_context` is how the tests and the benchmarks get a browser context: it refuses
``bypass_csp`` and installs, before any script of a page runs, a listener that keeps every
``securitypolicyviolation`` event; :func:`assert_no_csp_violations` fails naming them.
tests/test_pages_csp.py checks that nothing in tests/ or scripts/ turns CSP off another way.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, BrowserContext, Page

__all__ = [
    "CHROMIUM",
    "VIOLATIONS_PROBE",
    "assert_no_csp_violations",
    "csp_violations",
    "new_context",
]

CHROMIUM = "/usr/bin/chromium"

VIOLATIONS_PROBE = """
(() => {
  const seen = [];
  Object.defineProperty(window, "__cubicleCspViolations", { value: seen });
  document.addEventListener("securitypolicyviolation", (e) => {
    seen.push({
      directive: e.effectiveDirective,
      blocked: e.blockedURI,
      source: e.sourceFile,
      line: e.lineNumber,
      sample: e.sample,
    });
  }, true);
})();
"""
"""Runs in every frame before the page's own scripts (Playwright's init script)."""


def new_context(browser: Browser, **options: Any) -> BrowserContext:
    """A fresh context (no cookies) that enforces every page's CSP and records violations."""
    if options.get("bypass_csp"):
        raise AssertionError("cubicle's pages are tested as shipped: bypass_csp is not allowed")
    context = browser.new_context(**options)
    context.add_init_script(VIOLATIONS_PROBE)
    return context


def csp_violations(page: Page) -> list[dict[str, Any]]:
    """The violations the page's document reported so far (none if the probe is not there)."""
    found: list[dict[str, Any]] = page.evaluate("() => window.__cubicleCspViolations || null")
    if found is None:
        raise AssertionError(f"{page.url}: no violation probe (open pages with new_context)")
    return found


def assert_no_csp_violations(page: Page) -> None:
    found = csp_violations(page)
    assert found == [], f"{page.url}: Content-Security-Policy violations: {found}"
