"""What the live-view browser tests do with the page: open it, read its canvas, click it, compare
it with the agent's screenshot; a forged VNC client; the guest recorder's button presses. Shared
by the Docker and the VM tests."""

from __future__ import annotations

import io
import re
import time
from typing import Any

from PIL import Image, ImageChops, ImageStat
from playwright.sync_api import Page

from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import ViewLink
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


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def _past(deadline: float) -> bool:
    return time.monotonic() > deadline
