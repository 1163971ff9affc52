"""A person's paste in the live view of a Docker sandbox, in a real headless browser (Debian's
chromium, the page's CSP enforced): the browser's clipboard is written through its own Clipboard
API (permission granted to the page's origin) and Ctrl+V pressed on the page, as a person does.

View-only: the page delivers nothing and the server refuses a paste posted anyway. In control: a
text over the clipboard's limit is refused with an error on the page naming the limit; a Unicode
multi-line text lands in the focused editor exactly (saved with Ctrl+S through the view, read
back byte-exact), the guest's CLIPBOARD and PRIMARY hold it, and the hand-over's person actions
list the paste (never its text).
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page

from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import open_view
from cubicle_guest.protocol import MAX_CLIPBOARD_BYTES
from tests.desktop.checks import wait_window
from tests.orchestrator.test_files_docker import HOME, PASTED, SPAWN
from tests.view.viewpage import WaitingAgent, open_page

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BEFORE = "the guest's own clipboard ✓"
VIEW_ONLY_TEXT = "pasted while view-only ✗\n"
POST_PASTE = """async (text) => {
  const reply = await fetch("/api/paste", {
    method: "POST", headers: { "X-Cubicle-View": "1" }, body: text,
  });
  return [reply.status, (await reply.json()).error];
}"""
"""The page's own paste request, sent whatever the page's mode (a page that ignores view-only)."""


def browser_paste(page: Page, text: str) -> None:
    """Put ``text`` on the browser's clipboard and press Ctrl+V on the desktop's canvas."""
    page.evaluate("(text) => navigator.clipboard.writeText(text)", text)
    page.locator("#screen canvas").focus()
    page.keyboard.press("Control+v")


def test_paste_lands_exactly_in_control_and_not_at_all_when_view_only(
    page: Page, sandbox: Sandbox
) -> None:
    target = f"{HOME}/pasted.txt"
    sandbox.set_clipboard(BEFORE)
    with sandbox.connect() as client:
        client.write_file(target, b"")
        client.exec(["python3", "-c", SPAWN, "mousepad", target])
        wait_window(client, "Mousepad", 60)

    link = open_view(sandbox.id)
    page.context.grant_permissions(
        ["clipboard-read", "clipboard-write"], origin=link.url.split("/#")[0]
    )
    open_page(page, link)

    # view only: the page sends nothing, and the server refuses a paste posted anyway
    browser_paste(page, VIEW_ONLY_TEXT)
    status, error = page.evaluate(POST_PASTE, VIEW_ONLY_TEXT)
    assert (status, error) == (403, "view only: take control to paste into the desktop")
    assert page.evaluate("window.cubicleView.pasted") == 0
    assert sandbox.get_clipboard() == BEFORE

    page.click("#toggle")  # "Take control"
    page.wait_for_function(
        "() => window.cubicleView.connected && window.cubicleView.mode === 'takeover'",
        timeout=30_000,
    )
    agent = WaitingAgent(sandbox.id)

    # over the limit: a clear error on the page, nothing delivered, the view keeps serving
    browser_paste(page, "x" * (MAX_CLIPBOARD_BYTES + 1))
    page.wait_for_function("() => window.cubicleView.pasteError", timeout=30_000)
    error = page.evaluate("window.cubicleView.pasteError")
    assert error == (
        f"the pasted text is over the clipboard's limit of {MAX_CLIPBOARD_BYTES} bytes of UTF-8"
    )
    assert page.inner_text("#status") == error
    assert sandbox.get_clipboard() == BEFORE

    browser_paste(page, PASTED)
    page.wait_for_function("() => window.cubicleView.pasted === 1", timeout=30_000)
    assert page.inner_text("#status") == f"pasted {len(PASTED)} characters"
    page.keyboard.press("Control+s")  # saved by the person, through the view
    deadline = time.monotonic() + 30
    with sandbox.connect() as client:
        while client.read_file(target).blob != PASTED.encode() and time.monotonic() < deadline:
            client.settle(quiet_ms=200, timeout_ms=1000)
        saved = client.read_file(target).blob
    assert saved == PASTED.encode("utf-8"), saved  # and nothing of the view-only paste
    assert sandbox.get_clipboard() == PASTED
    assert sandbox.get_clipboard("primary") == PASTED

    agent.released(page)
    actions = agent.events[1][1]["person_actions"]
    pastes = [a for a in actions if a["kind"] == "paste"]
    assert len(pastes) == 1 and set(pastes[0]) == {"kind", "after_s"}, actions
