"""What a scripted turn expects to see in the screenshot it was sent (its ``sees`` list).

The request for turn ``n`` carries the screenshot taken after turn ``n-1``'s actions. A turn's
``sees`` lists facts that must hold on it, so a script that acts on a window that is not there
fails at once, naming the fact, instead of typing into the wrong place::

    "sees": [
      {"window": {"title": "Save As", "focused": true}},
      {"window": {"class": "Mousepad"}},
      {"pixel": [115, 624], "rgb": "#20242c", "tolerance": 24},
      {"changed": [0, 0, 1024, 600]},
      {"unchanged": [0, 600, 1024, 640]}
    ]

Coordinates are the model's (the screenshot's pixels); regions are ``[left, top, right,
bottom]`` (right/bottom exclusive). ``changed``/``unchanged`` compare with the screenshot the
previous turn was sent (for turn 1: the screen before the first action). ``window``: some
top-level window whose title contains ``title`` and/or whose class is ``class`` (and which has
the focus, with ``focused``), as the agent's ``windows`` op lists them. Every expectation may
carry ``"why"``, a few words shown when it fails.

Pure functions: :func:`parse_sees` validates, :meth:`Expectation.failure` judges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from PIL import Image, ImageChops

from cubicle.drivers.errors import ScriptError

__all__ = ["CHANGE_LEVEL", "Expectation", "parse_sees"]

CHANGE_LEVEL: Final = 24
"""A pixel counts as changed when some channel moved by more than this many levels."""
MIN_CHANGED_PIXELS: Final = 16
"""``changed`` holds when at least this many pixels of the region changed."""
_HEX = re.compile(r"^#[0-9a-fA-F]{6}$")
_KINDS: Final = ("window", "pixel", "changed", "unchanged")


@dataclass(frozen=True)
class Expectation:
    """One fact a turn expects; ``kind`` is one of ``window``, ``pixel``, ``changed``,
    ``unchanged``."""

    kind: str
    title: str | None = None
    wm_class: str | None = None
    focused: bool = False
    point: tuple[int, int] | None = None
    rgb: tuple[int, int, int] | None = None
    tolerance: int = 24
    region: tuple[int, int, int, int] | None = None
    why: str | None = None

    def describe(self) -> str:
        """The expectation in words (used in failures)."""
        if self.kind == "window":
            parts = []
            if self.title is not None:
                parts.append(f"titled like {self.title!r}")
            if self.wm_class is not None:
                parts.append(f"of class {self.wm_class!r}")
            text = f"a window {' and '.join(parts)}{', focused' if self.focused else ''}"
        elif self.kind == "pixel":
            assert self.point is not None and self.rgb is not None
            text = (
                f"pixel {list(self.point)} is #{bytes(self.rgb).hex()} "
                f"(within {self.tolerance} levels)"
            )
        else:
            text = f"region {list(self.region or ())} {self.kind}"
        return f"{text} ({self.why})" if self.why else text

    def failure(
        self,
        shot: Image.Image,
        previous: Image.Image | None,
        windows: list[dict[str, Any]],
    ) -> str | None:
        """``None`` when the expectation holds on ``shot``; else what was found instead.

        :param previous: the screenshot the previous turn was sent (same size), for
            ``changed``/``unchanged``.
        :param windows: the agent's ``windows`` list at the time of ``shot``.
        """
        if self.kind == "window":
            return self._window_failure(windows)
        if self.kind == "pixel":
            assert self.point is not None and self.rgb is not None
            x, y = self.point
            if not (0 <= x < shot.width and 0 <= y < shot.height):
                return f"({x}, {y}) is outside the {shot.width}x{shot.height} screenshot"
            got = shot.convert("RGB").getpixel((x, y))
            assert isinstance(got, tuple)
            if max(abs(int(a) - b) for a, b in zip(got, self.rgb, strict=True)) <= self.tolerance:
                return None
            return f"the pixel is #{bytes(int(v) for v in got).hex()}"
        assert self.region is not None
        if previous is None:
            return "there is no earlier screenshot to compare with"
        box = self.region
        if previous.size != shot.size:
            return f"the screenshots differ in size ({previous.size} vs {shot.size})"
        difference = ImageChops.difference(
            previous.convert("RGB").crop(box), shot.convert("RGB").crop(box)
        )
        red, green, blue = difference.split()
        largest = ImageChops.lighter(ImageChops.lighter(red, green), blue)
        changed = largest.point(lambda v: 255 if v > CHANGE_LEVEL else 0).histogram()[255]
        if self.kind == "changed":
            return None if changed >= MIN_CHANGED_PIXELS else f"{changed} pixels changed there"
        return None if changed < MIN_CHANGED_PIXELS else f"{changed} pixels changed there"

    def _window_failure(self, windows: list[dict[str, Any]]) -> str | None:
        for window in windows:
            title = str(window.get("title") or "")
            classes = [str(c) for c in window.get("wm_class") or []]
            if self.title is not None and self.title not in title:
                continue
            if self.wm_class is not None and self.wm_class not in classes:
                continue
            if self.focused and not window.get("focused"):
                continue
            return None
        seen = [
            f"{w.get('title')!r}{' (focused)' if w.get('focused') else ''}"
            for w in windows
            if w.get("type") != "dock"
        ]
        return f"windows seen: {', '.join(seen) or 'none'}"


def _box(value: object, where: str, path: str, turn: int) -> tuple[int, int, int, int]:
    if (
        isinstance(value, list)
        and len(value) == 4
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        and value[0] < value[2]
        and value[1] < value[3]
    ):
        return value[0], value[1], value[2], value[3]
    raise ScriptError(
        path, turn, f"{where} must be [left, top, right, bottom] with left<right, top<bottom"
    )


def _one(value: object, path: str, turn: int, where: str) -> Expectation:
    if not isinstance(value, dict):
        raise ScriptError(path, turn, f"{where} must be an object")
    kinds = [k for k in _KINDS if k in value]
    if len(kinds) != 1:
        raise ScriptError(path, turn, f"{where} needs exactly one of {', '.join(_KINDS)}")
    kind = kinds[0]
    allowed = {
        "window": {"window", "why"},
        "pixel": {"pixel", "rgb", "tolerance", "why"},
        "changed": {"changed", "why"},
        "unchanged": {"unchanged", "why"},
    }[kind]
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ScriptError(path, turn, f"{where}: unknown key {unknown[0]!r} for {kind}")
    why = value.get("why")
    if why is not None and not isinstance(why, str):
        raise ScriptError(path, turn, f"{where}.why must be a string")
    if kind == "window":
        spec = value["window"]
        if not isinstance(spec, dict) or not set(spec) <= {"title", "class", "focused"}:
            raise ScriptError(path, turn, f"{where}.window takes title, class, focused")
        title, wm_class, focused = spec.get("title"), spec.get("class"), spec.get("focused", False)
        if title is None and wm_class is None:
            raise ScriptError(path, turn, f"{where}.window needs a title or a class")
        if not all(v is None or (isinstance(v, str) and v) for v in (title, wm_class)):
            raise ScriptError(path, turn, f"{where}.window title/class must be non-empty strings")
        if not isinstance(focused, bool):
            raise ScriptError(path, turn, f"{where}.window.focused must be a boolean")
        return Expectation("window", title=title, wm_class=wm_class, focused=focused, why=why)
    if kind == "pixel":
        point = value["pixel"]
        if not (
            isinstance(point, list)
            and len(point) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in point)
        ):
            raise ScriptError(path, turn, f"{where}.pixel must be [x, y]")
        rgb = value.get("rgb")
        if not isinstance(rgb, str) or not _HEX.match(rgb):
            raise ScriptError(path, turn, f"{where}.rgb must be '#rrggbb', got {rgb!r:.20}")
        tolerance = value.get("tolerance", 24)
        if not isinstance(tolerance, int) or isinstance(tolerance, bool) or tolerance < 0:
            raise ScriptError(path, turn, f"{where}.tolerance must be a non-negative integer")
        colour = bytes.fromhex(rgb[1:])
        return Expectation(
            "pixel",
            point=(point[0], point[1]),
            rgb=(colour[0], colour[1], colour[2]),
            tolerance=tolerance,
            why=why,
        )
    return Expectation(kind, region=_box(value[kind], f"{where}.{kind}", path, turn), why=why)


def parse_sees(value: object, path: str, turn: int) -> tuple[Expectation, ...]:
    """Validate a turn's ``sees`` list. :raises ScriptError: naming the turn and the entry."""
    if turn == 0:
        raise ScriptError(path, turn, "sees: the first turn is sent no screenshot")
    if not isinstance(value, list):
        raise ScriptError(path, turn, "sees must be a list of expectations")
    return tuple(_one(item, path, turn, f"sees[{index}]") for index, item in enumerate(value))
