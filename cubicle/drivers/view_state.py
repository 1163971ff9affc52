"""The per-driver view state shared by the sync and async drivers (no I/O, no globals).

:class:`ViewState` knows the screen size (from the agent's ``hello``), the :class:`Viewport`
setting and the geometry of the last screenshot. It builds the ``screenshot`` request (region +
max size, so the guest crops and downscales) and checks the reply against the geometry.

**Before the first screenshot** the geometry is the viewport applied to the ``hello`` screen
size, i.e. exactly the geometry the first screenshot will have, so a model that acts before
looking is mapped as if it had seen that screenshot.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from openai.lib.computer import Screenshot
from PIL import Image

from cubicle.drivers.errors import ScreenshotMismatch
from cubicle.drivers.png import PngError, data_url, png_size
from cubicle.drivers.viewport import Rect, ViewGeometry, Viewport
from cubicle_guest.client import Reply

__all__ = ["ViewState", "pointer_of", "region_png", "screen_from_hello", "screenshot_output"]


def screen_from_hello(hello: Mapping[str, Any], name: str) -> tuple[int, int]:
    """The native screen size an agent's ``hello`` reports.

    :raises ScreenshotMismatch: the reply has no usable ``screen``.
    """
    screen = hello.get("screen")
    if (
        not isinstance(screen, dict)
        or not isinstance(screen.get("width"), int)
        or not isinstance(screen.get("height"), int)
    ):
        raise ScreenshotMismatch(f"agent {name} reported no screen size in hello: {screen!r:.80}")
    return int(screen["width"]), int(screen["height"])


class ViewState:
    """Screen size + viewport + the geometry of the last screenshot, for one driver."""

    def __init__(self, viewport: Viewport, screen: tuple[int, int]) -> None:
        self.viewport = viewport
        self.screen = screen
        self._last: ViewGeometry | None = None
        self.initial = viewport.geometry(*screen)  # raises ViewportError for a misfit crop now

    @property
    def geometry(self) -> ViewGeometry:
        """The geometry coordinates are mapped with: the last screenshot's, or the initial one."""
        return self._last if self._last is not None else self.initial

    @property
    def has_screenshot(self) -> bool:
        return self._last is not None

    def screenshot_request(self) -> tuple[dict[str, Any], ViewGeometry]:
        """Arguments of the next ``screenshot`` op and the geometry it must produce."""
        expected = self.viewport.geometry(*self.screen)
        args: dict[str, Any] = {"format": "png"}
        if not expected.is_identity:
            args["region"] = expected.crop.as_region()
            args["max_width"] = expected.width
            args["max_height"] = expected.height
        return args, expected

    def accept(self, result: Mapping[str, Any], blob: bytes, expected: ViewGeometry) -> bytes:
        """Check a screenshot reply against ``expected`` and make it the current geometry.

        In ``exact`` mode with an aspect ratio other than the crop's, the guest (which keeps the
        aspect ratio) returns a smaller image; it is resized on the host to the exact size.

        :return: PNG bytes at exactly the geometry's size.
        :raises ScreenshotMismatch: the screen, region, format or image size differ.
        """
        native = result.get("native")
        if native != {"width": expected.screen[0], "height": expected.screen[1]}:
            raise ScreenshotMismatch(
                f"screenshot: the screen is {native!r:.60}, the driver expected "
                f"{expected.screen[0]}x{expected.screen[1]} (screen size changed?)"
            )
        region = result.get("region")
        if region != expected.crop.as_region():
            raise ScreenshotMismatch(
                f"screenshot: the guest grabbed region {region!r:.80}, "
                f"expected {expected.crop.as_region()}"
            )
        if result.get("format") != "png":
            raise ScreenshotMismatch(f"screenshot: format {result.get('format')!r}, expected 'png'")
        try:
            size = png_size(blob)
        except PngError as exc:
            raise ScreenshotMismatch(f"screenshot: {exc}") from None
        if size != (result.get("width"), result.get("height")):
            raise ScreenshotMismatch(
                f"screenshot: the PNG is {size[0]}x{size[1]} but the reply says "
                f"{result.get('width')}x{result.get('height')}"
            )
        wanted = (expected.width, expected.height)
        if size != wanted:
            if self.viewport.mode != "exact":
                raise ScreenshotMismatch(
                    f"screenshot: the guest returned {size[0]}x{size[1]}, the view geometry is "
                    f"{expected.describe()}"
                )
            blob = _resize_png(blob, wanted)
        self._last = expected
        return blob


def _resize_png(blob: bytes, size: tuple[int, int]) -> bytes:
    with Image.open(io.BytesIO(blob)) as image:
        resized = image.resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    resized.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def screenshot_output(png: bytes) -> Screenshot:
    """The dict ``screenshot()`` returns to the SDK."""
    return {"type": "computer_screenshot", "image_url": data_url(png)}


def pointer_of(reply: Reply) -> tuple[int, int]:
    """The native point a ``pointer`` reply reports.

    :raises ScreenshotMismatch: the reply has no integer ``x``/``y``.
    """
    x, y = reply.result.get("x"), reply.result.get("y")
    if not isinstance(x, int) or not isinstance(y, int):
        raise ScreenshotMismatch(f"pointer: the agent answered {reply.result!r:.80}")
    return x, y


def region_png(reply: Reply, region: Rect) -> bytes:
    """The PNG of a native-resolution ``screenshot`` of ``region``, checked.

    :raises ScreenshotMismatch: another region, format or size came back.
    """
    if reply.result.get("region") != region.as_region() or reply.result.get("format") != "png":
        raise ScreenshotMismatch(
            f"screenshot: asked for {region.as_region()} as png, got "
            f"{reply.result.get('region')!r:.80} as {reply.result.get('format')!r}"
        )
    try:
        size = png_size(reply.blob)
    except PngError as exc:
        raise ScreenshotMismatch(f"screenshot: {exc}") from None
    if size != (region.width, region.height):
        raise ScreenshotMismatch(
            f"screenshot: the region is {region.width}x{region.height}, the PNG {size[0]}x{size[1]}"
        )
    return reply.blob
