"""Live view: `cubicle view` → first frame, and agent click → changed canvas pixel (chromium),
on a Docker sandbox and on a VM sandbox in the same run (each skipped, saying why, when its
backend is unavailable).

Side by side: the time from an agent click to the changed pixel showing in the view page's
canvas (x11vnc over the exec stream, or over the VM's view channel; websocket, noVNC), against
the model's own path — the same click, then a screenshot through the agent until it shows the
change. Also: a first link (server start, page, first frame) and a reused server (new page,
first frame). VMs run fewer rounds (``CUBICLE_BENCH_VM_REPEAT``, default 3; 10 clicks).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterator

from playwright.sync_api import Browser, Page, sync_playwright

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import open_view
from cubicle.orchestrator.view_servers import stop_view_servers
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError, GuestError
from cubicle_guest.waiting import Deadline, poll
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
w.map(); d.sync(); open("/tmp/toggler.ready", "w").close()
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
def _toggler(agent: AgentClient) -> Iterator[None]:
    """:data:`TOGGLER` running detached in the guest (started and ended through ``agent``)."""
    start = 'rm -f /tmp/toggler.ready; setsid -f python -c "$1" >/tmp/toggler.log 2>&1'
    agent.exec(["sh", "-c", start, "sh", TOGGLER], timeout=60)
    try:
        for _ in poll(Deadline(60), 0.1):
            with contextlib.suppress(GuestError):
                agent.read_file("/tmp/toggler.ready", timeout=30)
                break
        else:
            raise AssertionError("the toggler window did not come up")
        yield
    finally:
        agent.exec(["pkill", "-f", "toggler.ready"], timeout=60)


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
    if not shutil.which(CHROMIUM.rsplit("/", 1)[1]):
        raise Report.Skip(f"{CHROMIUM} is not installed")
    vm_rounds = int(os.environ.get("CUBICLE_BENCH_VM_REPEAT", "3"))
    measured = 0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            for backend, first_frames, clicks in (
                ("docker", FIRST_FRAMES, CLICKS),
                ("vm", vm_rounds, 10),
            ):
                try:
                    sandbox = _sandbox(backend)
                except Report.Skip as skip:
                    report.line(f"{backend}: skipped ({skip})")
                    continue
                try:
                    _bench(report, browser, sandbox, first_frames=first_frames, clicks=clicks)
                    measured += 1
                finally:
                    sandbox.destroy()
        finally:
            browser.close()
    if not measured:
        raise Report.Skip("neither Docker nor the VM backend is available")


def _sandbox(backend: str) -> Sandbox:
    """A fresh sandbox of ``backend``; :class:`Report.Skip` when that backend cannot run here."""
    if backend == "docker":
        docker_or_skip()
        return Sandbox.create("docker")
    if os.geteuid() != 0:
        raise Report.Skip("the VM bench needs root (qemu:///system, the shared VM image)")
    try:
        provider = VmProvider()
        provider.conn.getLibVersion()
        os.environ["CUBICLE_VM_IMAGE"] = provider.build_image(progress=lambda _line: None)
        return Sandbox.create("vm", screen=(1280, 800), ready_timeout_s=180)
    except CubicleError as exc:
        raise Report.Skip(f"libvirt/VM image unavailable: {exc}") from None


def _bench(
    report: Report, browser: Browser, sandbox: Sandbox, *, first_frames: int, clicks: int
) -> None:
    backend = sandbox.provider.name
    # as a person's browser opens the view: its CSP enforced, violations kept
    context = new_context(browser, viewport={"width": 1280, "height": 900})
    try:
        cold, warm = (
            Sample(f"{backend}: cubicle view -> first frame (server start)", []),
            Sample(f"{backend}: cubicle view -> first frame (server reused)", []),
        )
        for _ in range(first_frames):
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
        view = Sample(f"{backend}: agent click -> changed pixel in the view's canvas", [])
        model = Sample(f"{backend}: agent click -> changed pixel in an agent screenshot", [])
        with sandbox.connect(timeout=60) as agent, _toggler(agent):
            for _ in range(clicks):
                view.seconds.append(_click_to_canvas(page, agent))
                model.seconds.append(_click_to_screenshot(agent))
        _line(report, view)
        _line(report, model)
        report.line(f"{backend}: ratio view / screenshot: {view.p50 / model.p50:.2f}x (p50)")
        assert_no_csp_violations(page)
        report.line(f"{backend}: the view's Content-Security-Policy was enforced: no violation")
    finally:
        context.close()
