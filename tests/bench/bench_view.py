"""Live view: `cubicle view` → first frame, and agent click → changed canvas pixel (chromium).

Same run, side by side: the time from an agent click to the changed pixel showing in the view
page's canvas (x11vnc over the exec stream, websocket, noVNC), against the model's own path —
the same click, then a screenshot through the agent until it shows the change. Also: a first
link (server start, page, first frame) and a reused server (new page, first frame).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Iterator

from playwright.sync_api import Page, sync_playwright

from cubicle.orchestrator.providers.docker.exec import open_exec_socket
from cubicle.orchestrator.providers.docker.provider import GUEST_PYTHON, GUEST_UID, DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import open_view
from cubicle.orchestrator.view_servers import stop_view_servers
from cubicle_guest.client import AgentClient
from tests.bench.bench_docker import docker_or_skip
from tests.bench.report import Report, Sample
from tests.support.agent import pixel_at
from tests.support.pages import CHROMIUM, assert_no_csp_violations, new_context

CLICKS = 30
FIRST_FRAMES = 5
PIXEL = (200, 200)
REGION = {"x": PIXEL[0], "y": PIXEL[1], "width": 1, "height": 1}

TOGGLER = """
from Xlib import X, display
d = display.Display(":0")
s = d.screen()
w = s.root.create_window(0, 0, 400, 400, 0, s.root_depth, X.InputOutput, X.CopyFromParent,
                         background_pixel=s.white_pixel, event_mask=X.ButtonPressMask,
                         override_redirect=True)
w.map(); d.sync(); print("ready", flush=True)
white = True
while True:
    if d.next_event().type == X.ButtonPress:
        white = not white
        w.change_attributes(background_pixel=s.white_pixel if white else s.black_pixel)
        w.clear_area(); d.sync()
"""
"""A window in the guest that flips white/black on every click."""

WAIT_PIXEL = """([x, y, value, same]) => new Promise((resolve, reject) => {
  const ctx = document.querySelector('#screen canvas').getContext('2d');
  const give_up = performance.now() + 10000;
  const look = () => {
    const now = ctx.getImageData(x, y, 1, 1).data[0];
    if ((now === value) === same) resolve(now);
    else if (performance.now() > give_up) reject(new Error(
      `the pixel's red stayed ${now}: it was to ${same ? "become" : "change from"} ${value}`));
    else setTimeout(look, 1);
  };
  look();
})"""
"""Resolves with the red value of the canvas pixel (x, y) once it equals ``value`` (``same``)
or differs from it (not ``same``); rejects after 10 s."""


@contextlib.contextmanager
def _toggler(provider: DockerProvider, sandbox: Sandbox) -> Iterator[None]:
    info = provider.describe(sandbox.id)
    assert info is not None
    sock = open_exec_socket(
        provider.client.api,
        info.detail["container"],
        [GUEST_PYTHON, "-I", "-c", TOGGLER],
        user=f"{GUEST_UID}:{GUEST_UID}",
        name=sandbox.id,
    )
    sock.setblocking(True)
    try:
        assert b"ready" in sock.recv(4096)
        yield
    finally:
        sock.close()


def _first_frame(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_function(
        "() => window.cubicleView && window.cubicleView.connected", timeout=30_000
    )
    page.wait_for_function(
        "() => { const c = document.querySelector('#screen canvas');"
        " return c && c.getContext('2d').getImageData(10, 10, 1, 1).data[3] > 0; }",
        timeout=30_000,
    )


def _click_to_canvas(page: Page, agent: AgentClient) -> float:
    # the view may still lag behind the last change the screenshots saw: start from a canvas
    # that shows the screen, or a click and that late update could cancel out in the view
    before = page.evaluate(WAIT_PIXEL, [*PIXEL, pixel_at(agent, *PIXEL)[0], True])
    started: list[float] = []

    def click() -> None:
        started.append(time.perf_counter())
        agent.click(PIXEL[0], PIXEL[1])

    clicker = threading.Timer(0.05, click)
    clicker.start()
    page.evaluate(WAIT_PIXEL, [*PIXEL, before, False])
    done = time.perf_counter()
    clicker.join()
    return done - started[0]


def _click_to_screenshot(agent: AgentClient) -> float:
    before = agent.screenshot(region=REGION).blob
    started = time.perf_counter()
    agent.click(PIXEL[0], PIXEL[1])
    while agent.screenshot(region=REGION).blob == before:
        pass
    return time.perf_counter() - started


def _line(report: Report, sample: Sample) -> None:
    report.samples.append(sample)
    report.line(
        f"{sample.name:<58} p50 {sample.p50 * 1000:9.1f} ms   "
        f"p95 {sample.p95 * 1000:9.1f} ms   (n={len(sample.seconds)})"
    )


def run(report: Report) -> None:
    provider = docker_or_skip()
    if not shutil.which(CHROMIUM.rsplit("/", 1)[1]):
        raise Report.Skip(f"{CHROMIUM} is not installed")
    sandbox = Sandbox.create("docker")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            # as a person's browser opens the view: its CSP enforced, violations kept
            context = new_context(browser, viewport={"width": 1280, "height": 900})
            cold, warm = (
                Sample("cubicle view -> first frame (server start)", []),
                Sample("cubicle view -> first frame (server reused)", []),
            )
            for _ in range(FIRST_FRAMES):
                stop_view_servers(sandbox.id)
                page = context.new_page()
                start = time.perf_counter()
                _first_frame(page, open_view(sandbox.id).url)
                cold.seconds.append(time.perf_counter() - start)
                page.close()
                page = context.new_page()
                start = time.perf_counter()
                _first_frame(page, open_view(sandbox.id).url)
                warm.seconds.append(time.perf_counter() - start)
                page.close()
            _line(report, cold)
            _line(report, warm)

            page = context.new_page()
            _first_frame(page, open_view(sandbox.id).url)
            view = Sample("agent click -> changed pixel in the view's canvas", [])
            model = Sample("agent click -> changed pixel in an agent screenshot", [])
            with _toggler(provider, sandbox), sandbox.connect() as agent:
                for _ in range(CLICKS):
                    view.seconds.append(_click_to_canvas(page, agent))
                    model.seconds.append(_click_to_screenshot(agent))
            _line(report, view)
            _line(report, model)
            report.line(f"ratio view / screenshot: {view.p50 / model.p50:.2f}x (p50)")
            assert_no_csp_violations(page)
            report.line("the view's Content-Security-Policy was enforced: no violation")
            browser.close()
    finally:
        sandbox.destroy()
