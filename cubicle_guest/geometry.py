"""Rectangles in native screen pixels, shared by the agent and the host drivers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["CELL_PX", "Rect", "clusters", "fit_size", "largest_cluster"]

CELL_PX: Final = 32
"""Side of the square cells :meth:`Rect.cells` divides the screen into (pixels)."""


@dataclass(frozen=True)
class Rect:
    """A rectangle in native screen pixels: top-left ``(x, y)``, ``width`` x ``height``."""

    x: int
    y: int
    width: int
    height: int

    def contains(self, x: int, y: int) -> bool:
        return self.x <= x < self.x + self.width and self.y <= y < self.y + self.height

    def as_region(self) -> dict[str, int]:
        """The protocol's ``region`` form (``screenshot``, ``settle``, receipts' ``damage``)."""
        return {"x": self.x, "y": self.y, "width": self.width, "height": self.height}

    @classmethod
    def of(cls, region: Mapping[str, int]) -> Rect:
        """From the protocol's ``region`` form."""
        return cls(region["x"], region["y"], region["width"], region["height"])

    @property
    def area(self) -> int:
        return self.width * self.height

    def union(self, other: Rect) -> Rect:
        """The bounding box of both."""
        left, top = min(self.x, other.x), min(self.y, other.y)
        right = max(self.x + self.width, other.x + other.width)
        bottom = max(self.y + self.height, other.y + other.height)
        return Rect(left, top, right - left, bottom - top)

    def intersects(self, other: Rect) -> bool:
        return (
            self.x < other.x + other.width
            and other.x < self.x + self.width
            and self.y < other.y + other.height
            and other.y < self.y + self.height
        )

    def intersection(self, other: Rect) -> Rect | None:
        """The part of this rectangle inside ``other`` (``None``: they do not overlap)."""
        left, top = max(self.x, other.x), max(self.y, other.y)
        right = min(self.x + self.width, other.x + other.width)
        bottom = min(self.y + self.height, other.y + other.height)
        if right <= left or bottom <= top:
            return None
        return Rect(left, top, right - left, bottom - top)

    def cells(self) -> set[tuple[int, int]]:
        """The :data:`CELL_PX` grid cells this rectangle touches."""
        if self.width <= 0 or self.height <= 0:
            return set()
        return {
            (cx, cy)
            for cx in range(self.x // CELL_PX, (self.x + self.width - 1) // CELL_PX + 1)
            for cy in range(self.y // CELL_PX, (self.y + self.height - 1) // CELL_PX + 1)
        }

    def __str__(self) -> str:
        return f"{self.width}x{self.height}+{self.x}+{self.y}"

    def near(self, other: Rect, gap: int) -> bool:
        """Whether the two are at most ``gap`` pixels apart (overlapping counts)."""
        return (
            self.x - gap < other.x + other.width
            and other.x - gap < self.x + self.width
            and self.y - gap < other.y + other.height
            and other.y - gap < self.y + self.height
        )


def clusters(rects: list[Rect], gap: int = CELL_PX) -> list[Rect]:
    """The bounding boxes of the groups of ``rects`` that lie within ``gap`` pixels of each other.

    What changed on a screen is judged per group, not by one box around everything: a caret
    blinking at one end of the screen and a clock turning at the other are two small changes, not
    one large one.
    """
    groups: list[Rect] = []
    for rect in rects:
        merged = rect
        keep: list[Rect] = []
        for group in groups:
            if group.near(merged, gap):
                merged = merged.union(group)
            else:
                keep.append(group)
        groups = keep
        # a grown box may now reach groups it passed over: merge until nothing more joins
        while True:
            joined = [group for group in groups if group.near(merged, gap)]
            if not joined:
                break
            for group in joined:
                merged = merged.union(group)
            groups = [group for group in groups if group not in joined]
        groups.append(merged)
    return groups


def largest_cluster(rects: list[Rect], gap: int = CELL_PX) -> Rect | None:
    """The largest (by area) of :func:`clusters`, or None when there are no rectangles."""
    found = clusters(rects, gap)
    return max(found, key=lambda rect: rect.area) if found else None


def fit_size(
    width: int, height: int, max_width: int | None, max_height: int | None
) -> tuple[int, int]:
    """The largest size within (max_width, max_height) with the aspect of width x height.

    Never upscales; each side is at least 1 pixel; Python's ``round``. The one fit rule: the
    agent scales screenshots with it and the drivers predict the model's view with it.
    """
    scale = 1.0
    if max_width is not None:
        scale = min(scale, max_width / width)
    if max_height is not None:
        scale = min(scale, max_height / height)
    if scale >= 1.0:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))
