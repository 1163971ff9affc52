"""Full-screen PNGs that re-encode only what changed: the last screenshot kept band by band,
kept true by X DAMAGE.

Under TCG a full-screen PNG costs ~0.5 s of the guest's one vCPU (deflating 3 MB and converting
4 MB of pixels), and most model steps change a small part of the screen (a typed word, a menu,
the panel's clock). :class:`FrameCache` keeps the last full-screen screenshot as horizontal bands
of :data:`BAND_ROWS` rows (:class:`cubicle_guest.png.Band`); a screenshot re-grabs and re-deflates
only the bands that were drawn on since, and reuses the others' deflated bytes. A screen that did
not change at all costs one X round trip.

**What it returns is what one grab would have returned.** :class:`DamageRows` says which rows
were drawn on since it was last asked (every drawing into any window shows up as DAMAGE on the
root window). A screenshot asks it (``dirty``), grabs the rows from the first dirty band to the
last in *one* X request (XShmGetImage: the server draws nothing in between), and asks again
(``late``: drawn on since the first ask, i.e. possibly before the grab). When every band of
``dirty`` and ``late`` lies inside the grabbed rows, the kept bands outside them were not drawn on
from before the grab until after it, so the image — kept bands plus the grab's — is the screen at
the moment of the grab, and the bands of ``dirty`` and ``late`` are deflated from the grab. When
not (something drew outside the grabbed rows meanwhile), the grab is retried over the larger
span; the last of :data:`GRAB_TRIES` tries grabs the whole screen. Bands of ``late`` stay dirty
for the next screenshot (they may have changed after the grab). Nothing is clamped or guessed:
without DAMAGE (or once its X connection fails) every screenshot is encoded whole, as before.

The pointer is not part of a grab (the X server takes its sprite out of the image), so moving it
changes nothing here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Final

from Xlib import error as xerror
from Xlib.ext import damage

from cubicle_guest.png import Band, assemble_png, deflate_bands
from cubicle_guest.xdamage import open_root_damage

__all__ = ["BAND_ROWS", "GRAB_TRIES", "DamageRows", "FrameCache"]

BAND_ROWS: Final = 32
"""Rows per kept band: a change re-encodes at least this many full-width rows (a 1280-pixel
band of 32 rows is 120 KiB of pixels: ~1/25 of a 1280x800 screen)."""
GRAB_TRIES: Final = 3
"""Grabs of a screenshot while something keeps drawing outside the grabbed rows; the last
grabs the whole screen."""


class DamageRows:
    """Which screen rows were drawn on since the last :meth:`take`.

    Owns one X connection (no thread) and a DAMAGE object on the root window at the
    ``DeltaRectangles`` level: the server reports only *newly* damaged area until the damage
    is emptied, so whatever waits on the connection between two takes is bounded by the
    screen's area, however long and however much is drawn meanwhile.

    :raises GuestError: ``x11_error`` when the display cannot be opened or has no DAMAGE.
    """

    def __init__(self, display_name: str | None) -> None:
        opened = open_root_damage(display_name, damage.DamageReportDeltaRectangles)
        self._display = opened.display
        self._damage = opened.damage
        self._event_type = opened.event_type

    def take(self) -> list[tuple[int, int]]:
        """Row spans ``(top, bottom)`` (``bottom`` excluded; screen pixels, not clipped) drawn on
        since the previous take; the first take reports the whole screen (the DAMAGE object's
        creation does). One round trip: the damage is emptied, then a sync brings every event
        the server generated before it.

        :raises Xlib.error.ConnectionClosedError: the X server went away.
        """
        self._display.damage_subtract(self._damage)
        self._display.sync()
        spans = []
        while self._display.pending_events():
            event = self._display.next_event()
            if event.type == self._event_type:
                area = event.area
                spans.append((int(area.y), int(area.y) + int(area.height)))
        return spans

    def close(self) -> None:
        """Close the connection (a connection the server already closed is closed too)."""
        with contextlib.suppress(xerror.ConnectionClosedError, OSError):
            self._display.close()


class FrameCache:
    """The last full-screen PNG of a ``width`` x ``height`` screen, as bands (module docstring).

    Not thread-safe: its owner (:class:`cubicle_guest.screen.Screen`) serialises :meth:`png` calls.
    ``encoded_rows`` / ``grabbed_rows`` say what the last :meth:`png` re-encoded and grabbed
    (for tests and benchmarks).
    """

    def __init__(self, rows: DamageRows, width: int, height: int) -> None:
        self._rows = rows
        self.width = width
        self.height = height
        self._count = -(-height // BAND_ROWS)
        self._bands: list[Band | None] = [None] * self._count
        self._pending: set[int] = set(range(self._count))
        self._png: bytes | None = None
        self.encoded_rows = 0
        self.grabbed_rows = 0

    def _band_range(self, index: int) -> tuple[int, int]:
        return index * BAND_ROWS, min(self.height, (index + 1) * BAND_ROWS)

    def _bands_of(self, spans: Iterable[tuple[int, int]]) -> set[int]:
        bands: set[int] = set()
        for top, bottom in spans:
            first, last = max(0, top), min(self.height, bottom) - 1
            if first <= last:
                bands.update(range(first // BAND_ROWS, last // BAND_ROWS + 1))
        return bands

    def png(self, grab: Callable[[int, int], bytes | bytearray]) -> bytes:
        """The screen as a PNG, re-encoding only the bands drawn on since the last call.

        :param grab: ``grab(top, bottom)`` returns rows ``top..bottom-1`` of the whole screen's
            width as the X server's BGRX bytes, taken with **one** X request.
        :raises Xlib.error.ConnectionClosedError: the damage connection failed (the owner then
            stops using this cache).
        """
        # bands stay pending until a screenshot has encoded them: a failed grab loses none
        self._pending |= self._bands_of(self._rows.take())
        for attempt in range(GRAB_TRIES):
            if not self._pending and self._png is not None:
                self.encoded_rows = self.grabbed_rows = 0
                return self._png
            if attempt == GRAB_TRIES - 1:
                self._pending = set(range(self._count))
            first, last = min(self._pending), max(self._pending)
            top, bottom = self._band_range(first)[0], self._band_range(last)[1]
            pixels = grab(top, bottom)
            late = self._bands_of(self._rows.take())
            self._pending |= late
            if min(self._pending) >= first and max(self._pending) <= last:
                self._encode(sorted(self._pending), pixels, top)
                self._pending = late
                self.grabbed_rows = bottom - top
                self._png = assemble_png(self.width, self.height, self._kept())
                return self._png
        raise AssertionError("the last try grabs every band")  # pragma: no cover

    def _encode(self, indices: list[int], pixels: bytes | bytearray, top: int) -> None:
        bounds = [self._band_range(index) for index in indices]
        bands = deflate_bands(pixels, self.width, bounds, row_offset=top, bgrx=True)
        for index, band in zip(indices, bands, strict=True):
            self._bands[index] = band
        self.encoded_rows = sum(last - first for first, last in bounds)

    def _kept(self) -> list[Band]:
        bands = [band for band in self._bands if band is not None]
        if len(bands) != self._count:  # pragma: no cover - the first png() encodes every band
            raise AssertionError("a band was never encoded")
        return bands

    def close(self) -> None:
        self._rows.close()
