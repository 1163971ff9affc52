"""What the live-view browser tests do with the page: open it, read its canvas, click it, compare
it with the agent's screenshot; a forged VNC client; the guest recorder's button presses; the
agent's hand-over gate waiting in a thread; a person's paste into the editor. Shared by the
Docker and the VM tests."""

from __future__ import annotations

import io
import re
import threading
import time
from typing import Any

import requests
from PIL import Image, ImageChops, ImageStat
from playwright.sync_api import Page

from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import ViewLink, open_view
from cubicle.orchestrator.view.handover import HandoverGate
from cubicle.orchestrator.view_servers import read_state
from cubicle_guest.protocol import MAX_CLIPBOARD_BYTES
from tests.desktop.checks import wait_window
from tests.support.pages import assert_no_csp_violations
from tests.view.rfb import rfb_session

MAX_MAD = 0.03


def open_page(page: Page, link: ViewLink, *, mode: str = "view") -> None:
    page.goto(link.url)
    page.wait_for_function(
        "mode => window.cubicleView && window.cubicleView.connected"
        " && window.cubicleView.mode === mode",
        arg=mode,
        timeout=30_000,
    )


def canvas_image(page: Page) -> Image.Image:
    """The canvas as the page shows it (a screenshot of the element), at screen size."""
    shot = Image.open(io.BytesIO(page.locator("#screen canvas").screenshot())).convert("RGB")
    return shot if shot.size == (1280, 800) else shot.resize((1280, 800))


def mad(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute pixel difference, as a fraction of full scale."""
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB"))
    return sum(ImageStat.Stat(diff).mean) / 3 / 255


def wait_canvas_matches(page: Page, sandbox: Sandbox, *, timeout_s: float = 20.0) -> float:
    """Wait until the canvas shows the sandbox's screenshot (MAD under 3 %); return the MAD."""
    page.wait_for_function("() => !!document.querySelector('#screen canvas')", timeout=10_000)
    deadline = _deadline(timeout_s)
    while True:
        _, png = sandbox.screenshot()
        score = mad(canvas_image(page), Image.open(io.BytesIO(png)))
        if score < MAX_MAD or _past(deadline):
            return score
        page.wait_for_timeout(100)  # a frame in flight: the browser paints, then look again


def agent_click(sandbox: Sandbox, x: int, y: int) -> None:
    with sandbox.connect() as client:
        client.hello(timeout=10.0)
        client.click(x, y)


def presses(recorder: Any) -> list[tuple[int, int]]:
    return [(e["root_x"], e["root_y"]) for e in recorder.events() if e["kind"] == "ButtonPress"]


def click_canvas(page: Page, x: int, y: int) -> None:
    """Click the page where the canvas shows screen pixel (x, y)."""
    box = page.locator("#screen canvas").bounding_box()
    assert box is not None
    scale = box["width"] / 1280
    page.mouse.click(box["x"] + (x + 0.5) * scale, box["y"] + (y + 0.5) * scale)


def forged_pointer_click(link: ViewLink, cookie: str, x: int, y: int) -> None:
    """A VNC client of our own (not noVNC) that ignores view-only and sends a click."""
    port = int(re.match(r"http://127\.0\.0\.1:(\d+)/", link.url).group(1))  # type: ignore[union-attr]
    with rfb_session(port, cookie) as session:
        assert session.size == (1280, 800)
        session.click(x, y)


def session_cookie(page: Page) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "cubicle_view")


def assert_strict_csp(page: Page, link: ViewLink) -> None:
    """The page's own policy is enforced (no test switch), strict, and not violated."""
    policy = requests.get(link.url.split("#")[0], timeout=10).headers["content-security-policy"]
    assert "default-src 'none'" in policy and "unsafe" not in policy, policy
    assert_no_csp_violations(page)


def assert_view_only_delivers_no_input(
    page: Page, link: ViewLink, sandbox: Sandbox, recorder: Any
) -> None:
    """A canvas click (noVNC in view-only mode) and a forged VNC client's click deliver nothing:
    the agent's click (the barrier) is the only press the guest's ``recorder`` sees."""
    click_canvas(page, 100, 100)  # noVNC in view-only mode
    forged_pointer_click(link, session_cookie(page), 200, 200)  # a client ignoring view-only
    agent_click(sandbox, 300, 300)  # the barrier: the agent's click arrives
    recorder.wait_for(lambda e: e["kind"] == "ButtonPress")
    got = presses(recorder)
    assert got == [(300, 300)], f"presses in the guest: {got}"


class WaitingAgent:
    """The agent's hand-over gate for ``sandbox_id`` waiting in a thread (started here, once the
    person is in control: asserted within 10 s), with the gate's events and its answer."""

    def __init__(self, sandbox_id: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.taken = threading.Event()
        self.outcome: list[bool] = []
        gate = HandoverGate(sandbox_id, on_event=self._on_event)
        self.thread = threading.Thread(target=lambda: self.outcome.append(gate.wait()))
        self.thread.start()
        assert self.taken.wait(10), "the gate did not see the person in control"

    def _on_event(self, what: str, detail: dict[str, Any]) -> None:
        self.events.append((what, detail))
        if what == "taken":
            self.taken.set()

    def released(self, page: Page) -> None:
        """Give control back on the page: the gate answers True after ``taken``, ``released``."""
        page.click("#toggle")  # "Give control back"
        self.thread.join(10)
        assert self.outcome == [True], f"the gate answered {self.outcome}"
        seen = [what for what, _ in self.events]
        assert seen == ["taken", "released"], f"the gate's events: {seen}"


def assert_view_only_again(
    page: Page,
    sandbox: Sandbox,
    recorder: Any,
    *,
    timeout_ms: int,
    before: list[tuple[int, int]],
) -> None:
    """After a takeover: the page back in view mode (within ``timeout_ms``), the server's state
    ``view``, a canvas click delivering nothing; the recorder's presses are ``before`` and then
    the agent's click."""
    page.wait_for_function(
        "() => window.cubicleView.connected && window.cubicleView.mode === 'view'",
        timeout=timeout_ms,
    )
    state = read_state(sandbox.id)
    assert state is not None and state.mode == "view", f"the view server's state: {state}"
    click_canvas(page, 50, 60)  # view-only again
    agent_click(sandbox, 70, 80)
    recorder.wait_for(lambda e: e["kind"] == "ButtonPress" and e["root_x"] == 70)
    got = presses(recorder)
    assert got == [*before, (70, 80)], f"presses in the guest: {got}"


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def _past(deadline: float) -> bool:
    return time.monotonic() > deadline


PASTED = "Grüße 🙂🚀 漢字かな\nline two\n\tindented — end\n"
BEFORE = "the guest's own clipboard ✓"
VIEW_ONLY_TEXT = "pasted while view-only ✗\n"
SPAWN = (
    "import subprocess, sys; subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL, start_new_session=True)"
)
POST_PASTE = """async (text) => {
  const reply = await fetch("/api/paste", {
    method: "POST", headers: { "X-Cubicle-View": "1" }, body: text,
  });
  return [reply.status, (await reply.json()).error];
}"""
"""The page's own paste request, sent whatever the page's mode (a page that ignores view-only)."""


def browser_paste(page: Page, text: str) -> None:
    """Put ``text`` on the browser's clipboard (its Clipboard API; the permission is granted to
    the page's origin) and press Ctrl+V on the desktop's canvas, as a person does."""
    page.evaluate("(text) => navigator.clipboard.writeText(text)", text)
    page.locator("#screen canvas").focus()
    page.keyboard.press("Control+v")


def paste_round_trip(page: Page, sandbox: Sandbox, *, timeout_s: float) -> None:
    """The person's paste, in the editor (mousepad, focused) of ``sandbox``: view-only, the page
    sends nothing and the server refuses a paste posted anyway; in control, a text over the
    limit is refused on the page naming it, and :data:`PASTED` lands exactly (saved with Ctrl+S
    through the view, read back byte-exact), in CLIPBOARD and PRIMARY too; the hand-over's
    person actions list the paste without its text."""
    target = "/home/cubicle/pasted.txt"
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

    browser_paste(page, VIEW_ONLY_TEXT)
    status, error = page.evaluate(POST_PASTE, VIEW_ONLY_TEXT)
    assert (status, error) == (403, "view only: take control to paste into the desktop")
    assert page.evaluate("window.cubicleView.pasted") == 0
    assert sandbox.get_clipboard() == BEFORE

    page.click("#toggle")  # "Take control"
    page.wait_for_function(
        "() => window.cubicleView.connected && window.cubicleView.mode === 'takeover'",
        timeout=timeout_s * 1000,
    )
    agent = WaitingAgent(sandbox.id)

    # over the limit: a clear error on the page, nothing delivered, the view keeps serving
    browser_paste(page, "x" * (MAX_CLIPBOARD_BYTES + 1))
    page.wait_for_function("() => window.cubicleView.pasteError", timeout=timeout_s * 1000)
    error = page.evaluate("window.cubicleView.pasteError")
    assert error == (
        f"the pasted text is over the clipboard's limit of {MAX_CLIPBOARD_BYTES} bytes of UTF-8"
    )
    assert page.inner_text("#status") == error
    assert sandbox.get_clipboard() == BEFORE

    browser_paste(page, PASTED)
    page.wait_for_function("() => window.cubicleView.pasted === 1", timeout=timeout_s * 1000)
    assert page.inner_text("#status") == f"pasted {len(PASTED)} characters"
    page.keyboard.press("Control+s")  # saved by the person, through the view
    deadline = _deadline(timeout_s)
    with sandbox.connect() as client:
        while client.read_file(target).blob != PASTED.encode() and not _past(deadline):
            client.settle(quiet_ms=200, timeout_ms=1000)
        saved = client.read_file(target).blob
    assert saved == PASTED.encode("utf-8"), saved  # and nothing of the view-only paste
    assert sandbox.get_clipboard() == PASTED
    assert sandbox.get_clipboard("primary") == PASTED

    agent.released(page)
    actions = agent.events[1][1]["person_actions"]
    pastes = [a for a in actions if a["kind"] == "paste"]
    assert len(pastes) == 1 and set(pastes[0]) == {"kind", "after_s"}, actions
