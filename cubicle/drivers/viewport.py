"""Screenshot-to-screen coordinate scaling: what the model sees and how its clicks land.

Two coordinate spaces:

* **native** — X screen pixels of the guest display (origin top-left), what the agent speaks;
* **model** — pixels of the screenshot the model was shown (origin top-left of that image).

A :class:`Viewport` is a *setting* (view the whole screen or a crop of it, at native size, fitted
within a box keeping the aspect ratio, or at an exact size). Applied to a screen size it gives a
:class:`ViewGeometry`: the crop rectangle in native pixels, the image size in model pixels and
the scale between them. A driver records the geometry of every screenshot and maps every later
coordinate with it::

    native_x = crop.x + round(model_x * crop.width / image.width)      (same for y)

so an 800x600 view of a 1600x1200 screen doubles both coordinates, and a cropped view adds the
crop offset after scaling. Rounding is half-up. Coordinates are bounds-checked in **model** space
(``0 <= x < image width``) before any effect, and rejected, never clamped.

Scroll distances are pixels in model space too; they are scaled by the same per-axis factor
(``round(scroll * scale)``, half away from zero) into native pixels.

This module is pure arithmetic: no I/O, no globals; each driver owns its own geometry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from cubicle.drivers.errors import ActionRejected, CoordinateOutOfView, ViewportError
from cubicle_guest.geometry import Rect, fit_size

__all__ = ["Point", "Rect", "ViewGeometry", "Viewport"]

Point = tuple[int, int]
"""An ``(x, y)`` pixel position."""


def _round_half_up(value: float) -> int:
    return math.floor(value + 0.5)


def _round_half_away(value: float) -> int:
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


@dataclass(frozen=True)
class ViewGeometry:
    """How one screenshot relates to the screen.

    :param screen: native screen size ``(width, height)``.
    :param crop: the part of the screen shown, native pixels.
    :param width: image width, model pixels.
    :param height: image height, model pixels.
    """

    screen: tuple[int, int]
    crop: Rect
    width: int
    height: int

    @property
    def scale_x(self) -> float:
        """Native pixels per model pixel, horizontally (2.0 when the image is half size)."""
        return self.crop.width / self.width

    @property
    def scale_y(self) -> float:
        """Native pixels per model pixel, vertically."""
        return self.crop.height / self.height

    @property
    def is_identity(self) -> bool:
        return (self.crop.x, self.crop.y, self.crop.width, self.crop.height) == (
            0,
            0,
            self.width,
            self.height,
        )

    def contains(self, x: int, y: int) -> bool:
        """Whether model point ``(x, y)`` lies inside the image."""
        return 0 <= x < self.width and 0 <= y < self.height

    def to_native(self, x: int, y: int, *, action: str = "action") -> Point:
        """Map a model-pixel point to native screen pixels.

        :param action: names the action in the error.
        :raises CoordinateOutOfView: the point lies outside the image (never clamped).
        """
        if not self.contains(x, y):
            raise CoordinateOutOfView(action, x, y, self.width, self.height)
        native_x = self.crop.x + _round_half_up(x * self.scale_x)
        native_y = self.crop.y + _round_half_up(y * self.scale_y)
        # Only an upscaled view (image larger than the crop) can round onto the pixel just past
        # the crop's edge; the model's point was valid, so it maps to the crop's last pixel.
        native_x = min(native_x, self.crop.x + self.crop.width - 1)
        native_y = min(native_y, self.crop.y + self.crop.height - 1)
        return native_x, native_y

    def to_model(self, x: int, y: int) -> Point | None:
        """The model pixel a native screen point ``(x, y)`` lies in (``None``: outside the view's
        crop). The inverse of :meth:`to_native` up to rounding: ``floor((x - crop.x) / scale)``."""
        if not (
            self.crop.x <= x < self.crop.x + self.crop.width
            and self.crop.y <= y < self.crop.y + self.crop.height
        ):
            return None
        model_x = min(math.floor((x - self.crop.x) / self.scale_x), self.width - 1)
        model_y = min(math.floor((y - self.crop.y) / self.scale_y), self.height - 1)
        return model_x, model_y

    def region_to_native(self, x0: int, y0: int, x1: int, y1: int, *, action: str) -> Rect:
        """Map a model-pixel rectangle (corners ``(x0, y0)`` inclusive, ``(x1, y1)`` exclusive)
        to the native rectangle it shows.

        :raises ActionRejected: the corners are not ordered, or the rectangle leaves the image
            (never clamped).
        """
        if not (0 <= x0 < x1 <= self.width and 0 <= y0 < y1 <= self.height):
            raise ActionRejected(
                action,
                f"region ({x0}, {y0}, {x1}, {y1}) is not a rectangle inside the "
                f"{self.width}x{self.height} screenshot (need 0 <= x0 < x1 <= {self.width}, "
                f"0 <= y0 < y1 <= {self.height})",
            )
        left = self.crop.x + _round_half_up(x0 * self.scale_x)
        top = self.crop.y + _round_half_up(y0 * self.scale_y)
        right = self.crop.x + _round_half_up(x1 * self.scale_x)
        bottom = self.crop.y + _round_half_up(y1 * self.scale_y)
        return Rect(left, top, max(right - left, 1), max(bottom - top, 1))

    def scroll_to_native(self, scroll_x: int, scroll_y: int) -> Point:
        """Scale a scroll distance (model px) to native px per axis, rounding half away from 0."""
        return _round_half_away(scroll_x * self.scale_x), _round_half_away(scroll_y * self.scale_y)

    def describe(self) -> str:
        return (
            f"{self.width}x{self.height} view of {self.crop} on a "
            f"{self.screen[0]}x{self.screen[1]} screen "
            f"(scale {self.scale_x:.4g}x{self.scale_y:.4g})"
        )


@dataclass(frozen=True)
class Viewport:
    """What the model is shown: a mode, a target size, and optionally a crop of the screen.

    Build one with :meth:`native`, :meth:`fit` or :meth:`exact`.

    * ``native``: the crop (or the whole screen) at 1:1.
    * ``fit``: scaled down to fit within ``width`` x ``height`` keeping the aspect ratio
      (1920x1080 fit 1280x800 → 1280x720); never scaled up.
    * ``exact``: scaled to exactly ``width`` x ``height`` (per-axis factors may differ).
    """

    mode: Literal["native", "fit", "exact"] = "native"
    width: int | None = None
    height: int | None = None
    crop: Rect | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("native", "fit", "exact"):
            raise ViewportError(f"viewport mode must be native, fit or exact, got {self.mode!r}")
        if self.mode == "native":
            if self.width is not None or self.height is not None:
                raise ViewportError("a native viewport takes no size; use fit or exact")
        else:
            for name, value in (("width", self.width), ("height", self.height)):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ViewportError(
                        f"{self.mode} viewport {name} must be a positive integer, got {value!r}"
                    )
        if self.crop is not None and (
            self.crop.width < 1 or self.crop.height < 1 or self.crop.x < 0 or self.crop.y < 0
        ):
            raise ViewportError(
                f"crop rectangle {self.crop} must have a positive size and offset >= 0"
            )

    @classmethod
    def native(cls, crop: Rect | None = None) -> Viewport:
        return cls("native", None, None, crop)

    @classmethod
    def fit(cls, width: int, height: int, crop: Rect | None = None) -> Viewport:
        return cls("fit", width, height, crop)

    @classmethod
    def exact(cls, width: int, height: int, crop: Rect | None = None) -> Viewport:
        return cls("exact", width, height, crop)

    def geometry(self, screen_width: int, screen_height: int) -> ViewGeometry:
        """Apply this setting to a screen of the given native size.

        :raises ViewportError: the crop does not lie within the screen.
        """
        if screen_width < 1 or screen_height < 1:
            raise ViewportError(f"screen size {screen_width}x{screen_height} is not positive")
        crop = self.crop or Rect(0, 0, screen_width, screen_height)
        if crop.x + crop.width > screen_width or crop.y + crop.height > screen_height:
            raise ViewportError(
                f"crop rectangle {crop} extends beyond the {screen_width}x{screen_height} screen"
            )
        if self.mode == "native":
            width, height = crop.width, crop.height
        elif self.mode == "exact":
            assert self.width is not None and self.height is not None
            width, height = self.width, self.height
        else:
            assert self.width is not None and self.height is not None
            # the guest's own fit rule, so the model's view is the size the agent sends
            width, height = fit_size(crop.width, crop.height, self.width, self.height)
        return ViewGeometry((screen_width, screen_height), crop, width, height)
