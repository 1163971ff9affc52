"""Settled screenshots: action -> settled screenshot vs a fixed 2 s sleep, on a Docker sandbox.

Three scenarios, each measured both ways in the same run: typing into the editor, opening a
dialog (mousepad's Open), loading a local page in chromium ([ctrl+L, URL, Enter]). Ours: the
action with the driver's default settle, then the screenshot. Baseline (Anthropic's demo, OSWorld):
the action, a fixed 2 s sleep, the screenshot. For both: p50/p95, the share of settles that hit
the cap, and how many screenshots were stale (the screen changed visibly within 3 s after it,
with no new input). Targets on Docker: p50 <= 300 ms, >= 6x faster than the 2 s sleep, 0 stale.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from typing import Any

from PIL import Image

from guest import protocol
from guest.changes import changed_rects, is_visible
from guest.client import AgentClient
from guest.geometry import largest_cluster
from orchestrator.desktop import PANEL
from orchestrator.errors import EngineUnavailable, ImageMissing
from orchestrator.modelrun.guest_steps import GuestSteps
from orchestrator.providers.docker.provider import DockerProvider
from orchestrator.sandbox import Sandbox
from tests.bench.report import Report, Sample

REPEAT = 8
BASELINE_SLEEP_S = 2.0
STALE_WINDOW_S = 3.0
SETTLE = protocol.SettleSpec().as_args()
DEBUG_DIR = os.environ.get("CUBICLE_BENCH_STALE_DIR")
"""Set: stale screenshots and what the screen became are saved there (to see why)."""


def _shot(client: AgentClient) -> Image.Image:
    blob = client.call("screenshot", {"format": "png"}, timeout=30).blob
    return Image.open(io.BytesIO(blob)).convert("RGB")


def _stale(client: AgentClient, seen: Image.Image) -> bool:
    time.sleep(STALE_WINDOW_S)
    later = _shot(client)
    panel_top = PANEL.top(seen.size)  # the clock may turn a minute meanwhile: not the action's
    rects = [r for r in changed_rects(seen, later) if r.y + r.height <= panel_top]
    stale = is_visible(rects)
    if stale and DEBUG_DIR:
        stamp = time.monotonic_ns()
        seen.save(f"{DEBUG_DIR}/{stamp}-seen.png")
        later.save(f"{DEBUG_DIR}/{stamp}-later-{largest_cluster(rects)}.png")
    return stale


def _scenario(
    report: Report,
    client: AgentClient,
    name: str,
    act: Callable[[dict[str, Any] | None], dict[str, Any]],
    *,
    before: Callable[[], object] = lambda: None,
    reset: Callable[[], object] = lambda: None,
) -> None:
    """Measure ``act`` both ways; ``before`` runs untimed before each, ``reset`` after each."""
    ours, baseline = [], []
    capped = stale_ours = stale_baseline = 0
    for _ in range(REPEAT):
        before()
        started = time.perf_counter()
        result = act(SETTLE)
        seen = _shot(client)
        ours.append(time.perf_counter() - started)
        capped += int(not result.get("receipt", {}).get("settled", True))
        stale_ours += int(_stale(client, seen))
        reset()
        before()
        started = time.perf_counter()
        act(None)
        time.sleep(BASELINE_SLEEP_S)
        seen = _shot(client)
        baseline.append(time.perf_counter() - started)
        stale_baseline += int(_stale(client, seen))
        reset()
    mine = Sample(f"settle: {name} -> settled screenshot", ours)
    peer = Sample(f"peer: {name} -> 2 s sleep -> screenshot", baseline)
    for sample, stale in ((mine, stale_ours), (peer, stale_baseline)):
        report.samples.append(sample)
        report.line(
            f"{sample.name:<58} p50 {sample.p50 * 1000:9.2f} ms   "
            f"p95 {sample.p95 * 1000:9.2f} ms   (n={REPEAT}, stale {stale})"
        )
    report.line(f"{'':<58} settles that hit the cap: {capped}/{REPEAT}")
    report.ratio(mine, peer)
    report.target(mine, 0.3)


def _call(client: AgentClient, op: str, args: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    def act(settle: dict[str, Any] | None) -> dict[str, Any]:
        full = {**args, "settle": settle} if settle else dict(args)
        return client.call(op, full, timeout=60).result

    return act


def run(report: Report) -> None:
    try:
        DockerProvider().default_image()
    except (EngineUnavailable, ImageMissing) as exc:
        raise report.Skip(f"{exc} ({exc.hint})") from None
    with Sandbox.create() as sandbox, sandbox.connect() as client:
        report.line(f"settle method: {client.call('info').result.get('settle_method')}")
        steps = GuestSteps(client)
        port = 8765
        steps.start_form_server(port)
        steps.launch(["mousepad"])
        steps.wait_window("Mousepad", timeout_ms=30_000, focused=True)
        client.call("settle", {"quiet_ms": 500, "timeout_ms": 5000}, timeout=20)
        _scenario(
            report,
            client,
            "type 12 chars in the editor",
            _call(client, "type", {"text": "hello world "}),
        )
        _scenario(
            report,
            client,
            "ctrl+O opens a dialog",
            _call(client, "keypress", {"keys": ["CTRL", "O"]}),
            reset=lambda: _call(client, "keypress", {"keys": ["ESCAPE"]})(SETTLE),
        )
        steps.stop_launched()
        steps.start_form_server(port)
        steps.launch(
            [
                "chromium",
                f"--user-data-dir={steps.home}/bench-profile",
                "--no-first-run",
                "--disable-gpu",
                f"http://127.0.0.1:{port}/",
            ]
        )
        steps.wait_window("Cubicle drill form ready", timeout_ms=60_000, focused=True)
        client.call("settle", {"quiet_ms": 500, "timeout_ms": 5000}, timeout=20)
        counter = iter(range(10_000))

        def type_url() -> None:
            _call(client, "keypress", {"keys": ["CTRL", "L"]})(SETTLE)
            _call(client, "type", {"text": f"127.0.0.1:{port}/?n={next(counter)}"})(SETTLE)

        _scenario(
            report,
            client,
            "load a local page (Enter after the URL)",
            _call(client, "keypress", {"keys": ["ENTER"]}),
            before=type_url,
        )
        steps.stop_launched()
