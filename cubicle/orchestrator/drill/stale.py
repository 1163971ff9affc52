"""Counting stale model-visible screenshots.

A screenshot the model received is *stale* when it follows a ``computer_call`` that contained a
state-changing action (:data:`cubicle.drivers.stall.STATE_CHANGING`) whose effect shows later: the
screen changes again within :data:`STALE_WINDOW_S` without new input, and the change is not in
what the model saw. :class:`StaleCheck` measures exactly that: before the model's next turn it
waits the window out with no input, grabs the same view again and compares it with the
screenshot the model received. It is stale when the difference is a *visible change*
(:func:`cubicle_guest.changes.is_visible`: some group of nearby changed pixels has a bounding box,
in native screen pixels, larger than :data:`cubicle_guest.protocol.VISIBLE_CHANGE_AREA`; a caret's
blink is not one). Dock windows (the panel, whose clock may turn a minute meanwhile) are left out of
the comparison, and so is whatever is still *animating* when the window ends: the view is
grabbed twice, :data:`ANIMATION_PROBE_S` apart, and the cells
(:data:`cubicle_guest.geometry.CELL_PX` squares) that differ between those two grabs — a tab's load
spinner, an animated page — are ongoing motion, not an effect that showed later (an effect that
arrived settles: it is the same in both grabs and counts).
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import Any, Final

from PIL import Image, ImageDraw

from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle_guest.changes import changed_rects, is_visible
from cubicle_guest.client import AgentClient
from cubicle_guest.geometry import CELL_PX, Rect, largest_cluster

__all__ = ["STALE_WINDOW_S", "StaleCheck", "StaleVerdict"]

STALE_WINDOW_S: Final = 3.0
"""How long after a screenshot a late effect still makes it stale (seconds)."""
ANIMATION_PROBE_S: Final = 0.25
"""The pause between the two grabs that tell ongoing animation from a settled late effect
(seconds): longer than a spinner's or an animated page's frame (16-100 ms)."""


@dataclass(frozen=True)
class StaleVerdict:
    """One comparison: ``box`` (left, top, right, bottom) and ``area`` of the largest changed group
    in native pixels (None and 0: nothing changed)."""

    stale: bool
    box: tuple[int, int, int, int] | None
    area: int
    animating: tuple[int, int, int, int] | None = None
    """The bounding box (view pixels) of what was still animating, left out (None: nothing)."""


class StaleCheck:
    """Compare model-visible screenshots with the screen :data:`STALE_WINDOW_S` later.

    :param client: the agent connection (the caller owns it; it must not be sending input
        meanwhile — the drill calls this while the model is "thinking").
    :param args: the ``screenshot`` arguments the driver uses (same crop and size).
    :param screen: native screen size; ``view``: the model's image size.
    """

    def __init__(
        self,
        client: AgentClient,
        args: dict[str, Any],
        *,
        screen: tuple[int, int],
        view: tuple[int, int],
        recorder: TrajectoryRecorder | None = None,
        window_s: float = STALE_WINDOW_S,
    ) -> None:
        self.client = client
        self.args = dict(args)
        self.scale = (screen[0] / view[0], screen[1] / view[1])
        self.recorder = recorder
        self.window_s = window_s
        self.checked = 0
        self.stale = 0

    def check(self, seen_png: bytes, shot_index: int | None) -> StaleVerdict:
        """Wait the window out, grab the view twice, compare with ``seen_png``; count it."""
        time.sleep(self.window_s)
        reply = self.client.screenshot(**self.args, timeout=30)
        time.sleep(ANIMATION_PROBE_S)
        again = self.client.screenshot(**self.args, timeout=30)
        docks = [
            w
            for w in self.client.windows(timeout=10).result.get("windows") or []
            if isinstance(w, dict) and w.get("type") == "dock"
        ]
        before, after, latest = (_rgb(png) for png in (seen_png, reply.blob, again.blob))
        if before.size != after.size:
            after, latest = after.resize(before.size), latest.resize(before.size)
        moving = changed_rects(after, latest)
        for image in (before, after):
            draw = ImageDraw.Draw(image)
            for dock in docks:
                draw.rectangle(self._to_view(dock), fill=(0, 0, 0))
            for rect in moving:  # whole cells: a spinner's frames differ in different pixels
                for cx, cy in rect.cells():
                    left, top = cx * CELL_PX, cy * CELL_PX
                    draw.rectangle(
                        (left, top, left + CELL_PX - 1, top + CELL_PX - 1), fill=(0, 0, 0)
                    )
        animating = _bounds(moving)
        # judged in native screen pixels, group by group (a blinking caret is not a change)
        rects = [
            Rect(
                round(r.x * self.scale[0]),
                round(r.y * self.scale[1]),
                max(1, round(r.width * self.scale[0])),
                max(1, round(r.height * self.scale[1])),
            )
            for r in changed_rects(before, after)
        ]
        largest = largest_cluster(rects)
        verdict = StaleVerdict(False, None, 0, animating)
        if largest is not None:
            verdict = StaleVerdict(
                is_visible(rects),
                (largest.x, largest.y, largest.x + largest.width, largest.y + largest.height),
                largest.area,
                animating,
            )
        self.checked += 1
        self.stale += int(verdict.stale)
        if self.recorder is not None:
            later = None
            if verdict.stale:  # keep what the screen became, beside the shot the model got
                later = f"stale/{self.checked:04d}-later.png"
                (self.recorder.folder / "stale").mkdir(exist_ok=True)
                (self.recorder.folder / later).write_bytes(reply.blob)
            self.recorder.event(
                "stale_check",
                shot=shot_index,
                later=later,
                stale=verdict.stale,
                changed_box=list(verdict.box) if verdict.box else None,
                changed_area=verdict.area,
                animating_box=list(verdict.animating) if verdict.animating else None,
                window_s=self.window_s,
            )
        return verdict

    def _to_view(self, window: dict[str, Any]) -> tuple[int, int, int, int]:
        x, y = int(window.get("x", 0)), int(window.get("y", 0))
        w, h = int(window.get("width", 0)), int(window.get("height", 0))
        return (
            int(x / self.scale[0]),
            int(y / self.scale[1]),
            int((x + w) / self.scale[0]) + 1,
            int((y + h) / self.scale[1]) + 1,
        )


def _rgb(png: bytes) -> Image.Image:
    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")


def _bounds(rects: list[Rect]) -> tuple[int, int, int, int] | None:
    """(left, top, right, bottom) around all of ``rects`` (None: no rects)."""
    if not rects:
        return None
    box = rects[0]
    for rect in rects[1:]:
        box = box.union(rect)
    return (box.x, box.y, box.x + box.width, box.y + box.height)
