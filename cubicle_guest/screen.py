"""Screenshots (mss grab → PNG/JPEG with Pillow); waiting for changes is
:mod:`cubicle_guest.changes`.

:class:`Screen` owns one mss instance (its own X connection, XShm when available). Regions are
native screen pixels; the image may be downscaled to fit ``max_width``/``max_height`` keeping
the aspect ratio (never upscaled). PNG favours speed over size: a screenshot's round trip is on
every model step.

PNG is written by :mod:`cubicle_guest.png` (filter None, zlib level 1, bands deflated in parallel),
which is several times faster than Pillow's encoder; JPEG by Pillow. A full-screen PNG at native
size (what a driver asks for on every step) re-encodes only the rows drawn on since the previous one
(:mod:`cubicle_guest.framecache`), when the X server has DAMAGE.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from PIL import Image, JpegImagePlugin
from Xlib import error as xerror

from cubicle_guest import libfind
from cubicle_guest.errors import GuestError
from cubicle_guest.framecache import DamageRows, FrameCache
from cubicle_guest.geometry import fit_size
from cubicle_guest.png import encode_png

libfind.install()  # before mss, which looks up 8 shared libraries as it is imported and starts
import mss  # noqa: E402

__all__ = ["Screen", "Shot"]

log = logging.getLogger("cubicle_guest.screen")

assert JpegImagePlugin  # registered at import, not on the first JPEG request

DEFAULT_JPEG_QUALITY: Final = 80


@dataclass(frozen=True)
class Shot:
    """An encoded screenshot: ``data`` in ``format``, of ``width``x``height`` image pixels,
    grabbed from ``region`` (native pixels) of a ``native`` screen."""

    data: bytes
    format: str
    width: int
    height: int
    region: dict[str, int]
    native: dict[str, int]

    def result(self) -> dict[str, Any]:
        return {
            "native": self.native,
            "region": self.region,
            "width": self.width,
            "height": self.height,
            "format": self.format,
            "bytes": len(self.data),
        }


class Screen:
    """Grab and encode the screen of one X display.

    :param display_name: X display; ``None`` uses ``$DISPLAY``.
    :param width: screen width, pixels (the agent's XInput knows it).
    :param height: screen height, pixels.
    :param incremental: keep the last full-screen PNG and re-encode only what changed
        (:mod:`cubicle_guest.framecache`); without DAMAGE, or with ``False``, every PNG is encoded
        whole.
    """

    def __init__(
        self, display_name: str | None, width: int, height: int, *, incremental: bool = True
    ) -> None:
        self._lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cache: FrameCache | None = None
        try:
            factory = getattr(mss, "MSS", None) or mss.mss  # mss >= 10.2 deprecates mss.mss
            self._mss = factory(display=display_name) if display_name else factory()
        except mss.exception.ScreenShotError as exc:
            raise GuestError("x11_error", f"cannot grab X display {display_name!r}: {exc}") from exc
        self.width = width
        self.height = height
        if incremental:
            try:
                self._cache = FrameCache(DamageRows(display_name), width, height)
            except GuestError as exc:
                log.info("every screenshot is encoded whole: %s", exc.reason)
            except BaseException:
                self._mss.close()
                raise

    @property
    def frame_cache(self) -> FrameCache | None:
        """The incremental full-screen PNG, or None when every PNG is encoded whole."""
        return self._cache

    def close(self) -> None:
        with self._cache_lock:
            if self._cache is not None:
                self._cache.close()
                self._cache = None
        with self._lock:
            self._mss.close()

    # -- regions --------------------------------------------------------------------------

    def region(self, region: Mapping[str, int] | None) -> dict[str, int]:
        """Validate a region (native pixels) or return the whole screen.

        :raises GuestError: ``bad_args`` for an empty region, ``out_of_bounds`` for one that
            does not fit the screen.
        """
        if region is None:
            return {"x": 0, "y": 0, "width": self.width, "height": self.height}
        x, y, w, h = region["x"], region["y"], region["width"], region["height"]
        if w <= 0 or h <= 0:
            raise GuestError(
                "bad_args",
                f"region {w}x{h} is empty; width and height must be > 0",
                details={"region": dict(region)},
            )
        if x < 0 or y < 0 or x + w > self.width or y + h > self.height:
            raise GuestError(
                "out_of_bounds",
                f"region x={x} y={y} {w}x{h} does not fit the screen {self.width}x{self.height}",
                details={"region": dict(region), "width": self.width, "height": self.height},
            )
        return {"x": x, "y": y, "width": w, "height": h}

    def _grab(self, area: Mapping[str, int]) -> Any:
        monitor = {
            "left": area["x"],
            "top": area["y"],
            "width": area["width"],
            "height": area["height"],
        }
        try:
            with self._lock:
                return self._mss.grab(monitor)
        except mss.exception.ScreenShotError as exc:
            raise GuestError("x11_error", f"screen grab of {monitor} failed: {exc}") from exc

    def _grab_rows(self, top: int, bottom: int) -> bytearray:
        """Rows ``top..bottom-1`` of the whole screen's width, BGRX, from one X request."""
        area = {"x": 0, "y": top, "width": self.width, "height": bottom - top}
        raw: bytearray = self._grab(area).raw
        return raw

    def _full_screen_png(self) -> bytes | None:
        """The whole screen from the frame cache; None without one (or once it failed)."""
        with self._cache_lock:
            if self._cache is None:
                return None
            try:
                return self._cache.png(self._grab_rows)
            except (xerror.XError, xerror.ConnectionClosedError, OSError) as exc:
                log.warning("frame cache stopped, every screenshot is encoded whole: %s", exc)
                self._cache.close()
                self._cache = None
                return None

    # -- operations -----------------------------------------------------------------------

    def grab_image(self, region: Mapping[str, int] | None = None) -> Image.Image:
        """The (validated) region as an RGB Pillow image, native pixels."""
        area = self.region(region)
        shot = self._grab(area)
        return Image.frombuffer("RGB", shot.size, shot.bgra, "raw", "BGRX", 0, 1)

    def grab_raw(self, region: Mapping[str, int] | None = None) -> Image.Image:
        """The (validated) region as X delivers it, without converting a pixel: an ``RGBX``
        image whose bands hold blue, green, red and padding (~2 ms for 1280x800, a third of
        :meth:`grab_image`). For comparing grabs with each other, not for showing."""
        shot = self._grab(self.region(region))
        return Image.frombuffer("RGBX", shot.size, shot.raw, "raw", "RGBX", 0, 1)

    def screenshot(
        self,
        *,
        format: str = "png",
        quality: int | None = None,
        max_width: int | None = None,
        max_height: int | None = None,
        region: Mapping[str, int] | None = None,
    ) -> Shot:
        """Grab, optionally downscale to fit ``max_width``x``max_height``, and encode.

        :raises GuestError: ``bad_args`` for a bad quality/size, ``out_of_bounds`` for a region
            outside the screen.
        """
        if format not in ("png", "jpeg"):
            raise GuestError("bad_args", f'format must be "png" or "jpeg", got {format!r}')
        if quality is not None and (format != "jpeg" or not 1 <= quality <= 95):
            raise GuestError(
                "bad_args",
                f"quality applies to jpeg only and must be 1..95, got {quality} for {format}",
                details={"quality": quality},
            )
        for name, limit in (("max_width", max_width), ("max_height", max_height)):
            if limit is not None and limit < 1:
                raise GuestError(
                    "bad_args", f"{name} must be >= 1, got {limit}", details={name: limit}
                )
        area = self.region(region)
        target = fit_size(area["width"], area["height"], max_width, max_height)
        if format == "png" and target == (area["width"], area["height"]):
            # the hot path: BGRX straight from the grab into the banded PNG writer
            data = self._full_screen_png() if area == self.region(None) else None
            if data is None:
                data = encode_png(self._grab(area).raw, area["width"], area["height"], bgrx=True)
            return Shot(
                data,
                format,
                area["width"],
                area["height"],
                area,
                {"width": self.width, "height": self.height},
            )
        image = self.grab_image(area)
        if target != image.size:
            image = image.resize(target, Image.Resampling.LANCZOS, reducing_gap=3.0)
        if format == "png":
            data = encode_png(image.tobytes(), image.width, image.height)
        else:
            buffer = io.BytesIO()
            image.save(buffer, "JPEG", quality=quality or DEFAULT_JPEG_QUALITY)
            data = buffer.getvalue()
        return Shot(
            data,
            format,
            image.width,
            image.height,
            area,
            {"width": self.width, "height": self.height},
        )
