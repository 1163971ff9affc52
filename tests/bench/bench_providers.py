"""Provider adapters: a click through Claude's toolset and Gemini's calls vs the OpenAI path.

Same run, same agent on a local Xvfb (unix socket, settle off so only the host's work and the
round trip are timed), the three paths in alternating rounds: ``GuestDriver.click`` (the
ComputerDriver the openai SDK calls), ``ClaudeToolset.call("left_click")`` (the anthropic SDK's
pipeline: input parsing, confirm, our planning, result rendering) and
``GeminiComputer.execute("click_at")`` (field checks, grid mapping). The ratios are each adapter's
per-action overhead over the OpenAI path.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from anthropic.tools import BetaToolsetCallContext
from openai.types.responses import computer_action as modern

from cubicle.drivers.claude_toolset import ClaudeToolset
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.gemini_actions import GeminiComputer
from cubicle.drivers.viewport import Viewport
from tests.bench.report import Report, Sample
from tests.support.agent import start_agent
from tests.support.xvfb import Xvfb, XvfbUnavailable

CLICKS = 300
ROUNDS = 6


def _times(action: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def _measure(driver: GuestDriver) -> list[Sample]:
    """The three paths' click times, in alternating rounds."""
    with ClaudeToolset(driver, confirm=lambda _: True) as claude:
        gemini = GeminiComputer(driver)
        context = BetaToolsetCallContext()
        action = modern.Click(type="click", button="left", x=320, y=200)
        paths: list[tuple[Sample, Callable[[], object]]] = [
            (Sample("click via the OpenAI ComputerDriver path", []), lambda: driver.click(action)),
            (
                Sample("left_click via ClaudeToolset.call", []),
                lambda: claude.call(context, "left_click", {"coordinate": [320, 200]}),
            ),
            (
                Sample("click_at via GeminiComputer.execute", []),
                lambda: gemini.execute("click_at", {"x": 500, "y": 500}),
            ),
        ]
        for _sample, act in paths:
            _times(act, 10)  # warm-up
        for _ in range(ROUNDS):
            for sample, act in paths:
                sample.seconds += _times(act, CLICKS // ROUNDS)
    return [sample for sample, _act in paths]


def run(report: Report) -> None:
    try:
        xvfb = Xvfb(1280, 800).start()
    except XvfbUnavailable as exc:
        raise report.Skip(str(exc)) from None
    with (
        xvfb,
        tempfile.TemporaryDirectory(prefix="cbl-bench-", dir="/tmp") as folder,
        start_agent(xvfb.display, Path(folder)) as agent,
        GuestDriver.connect(
            agent.socket_path, viewport=Viewport.fit(640, 400), settle=False
        ) as driver,
    ):
        samples = _measure(driver)
    openai_path = samples[0]
    for sample in samples:
        report.samples.append(sample)
        report.line(
            f"{sample.name:<46} p50 {sample.p50 * 1000:8.3f} ms   "
            f"p95 {sample.p95 * 1000:8.3f} ms   (n={len(sample.seconds)})"
        )
    for sample in samples[1:]:
        extra = (sample.p50 - openai_path.p50) * 1000
        report.line(
            f"{sample.name}: {sample.p50 / openai_path.p50:.2f}x the OpenAI path "
            f"({extra:+.3f} ms p50 per action)"
        )
