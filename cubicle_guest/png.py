"""A fast lossless PNG writer for screenshots (standard library zlib only), band by band.

Pillow's PNG encoder runs an adaptive per-row filter search, which costs more than the
compression itself on a 1280x800 screen (tens of ms). Screenshots are sent on every model step,
so this writer uses filter type 0 (None) and zlib level 1, and deflates horizontal *bands* of the
image apart (in parallel threads: zlib and Pillow's unpacker release the GIL).

A :class:`Band` is one raw deflate stream of its filtered rows that ends byte-aligned and not
final (a sync flush), with the Adler-32 of those rows. Any sequence of bands, top to bottom, is
one valid zlib stream once joined and ended by an empty final block (:func:`assemble_png`; the
stream's Adler-32 is the bands' combined, :func:`adler32_combine`). So a band can be kept and
reused while its rows have not changed (:mod:`cubicle_guest.framecache`), and re-deflated alone
when they have. Any PNG decoder reads the result.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

__all__ = ["Band", "adler32_combine", "assemble_png", "deflate_bands", "encode_png"]

_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_ZLIB_HEADER: Final = b"\x78\x01"  # deflate, 32 KiB window, fastest
_FINAL_EMPTY_BLOCK: Final = b"\x03\x00"  # BFINAL=1, fixed Huffman, end-of-block
_ADLER_BASE: Final = 65521
_MIN_ROWS_PER_BAND: Final = 128
_THREADS: Final = max(1, min(4, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None


@dataclass(frozen=True)
class Band:
    """Rows ``first``..``last-1`` of an image, filtered (type 0) and deflated on their own.

    ``body`` is a raw deflate stream ending byte-aligned, not final; ``adler`` the Adler-32 of
    the ``size`` bytes of filtered rows it holds.
    """

    first: int
    last: int
    body: bytes
    adler: int
    size: int


def adler32_combine(first: int, second: int, second_size: int) -> int:
    """The Adler-32 of ``a + b`` from ``adler32(a)``, ``adler32(b)`` and ``len(b)`` (zlib's
    ``adler32_combine``, which Python's :mod:`zlib` does not expose)."""
    rem = second_size % _ADLER_BASE
    sum1 = first & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_BASE
    sum1 = (sum1 + (second & 0xFFFF) + _ADLER_BASE - 1) % _ADLER_BASE
    sum2 = (sum2 + (first >> 16) + (second >> 16) + _ADLER_BASE - rem) % _ADLER_BASE
    return sum1 | (sum2 << 16)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack("!I", len(data))
        + kind
        + data
        + struct.pack("!I", zlib.crc32(data, zlib.crc32(kind)))
    )


def _filtered(rgb: memoryview | bytes, stride: int, first: int, last: int) -> bytes:
    """Rows ``first``..``last-1`` of the image, each prefixed with filter type 0."""
    view = memoryview(rgb)
    return b"".join(b"\0" + view[row * stride : (row + 1) * stride] for row in range(first, last))


def _deflate_band(  # noqa: PLR0917 - the pool submits it positionally
    pixels: memoryview, width: int, first: int, last: int, row_offset: int, level: int, bgrx: bool
) -> Band:
    """Band ``first..last`` of the image; ``pixels`` hold its rows from ``row_offset`` on."""
    lo, hi = first - row_offset, last - row_offset
    if bgrx:  # convert this band only, in this worker (Pillow releases the GIL while unpacking)
        from PIL import Image  # noqa: PLC0415 - Pillow only for the BGRX input

        rgb = Image.frombuffer(
            "RGB",
            (width, hi - lo),
            pixels[lo * width * 4 : hi * width * 4],  # type: ignore[arg-type]
            "raw",
            "BGRX",
            0,
            1,
        ).tobytes()
        data = _filtered(rgb, width * 3, 0, hi - lo)
    else:
        data = _filtered(pixels, width * 3, lo, hi)
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return Band(first, last, body, zlib.adler32(data), len(data))


def deflate_bands(
    pixels: bytes | bytearray | memoryview,
    width: int,
    bounds: Sequence[tuple[int, int]],
    *,
    row_offset: int = 0,
    level: int = 1,
    bgrx: bool = False,
) -> list[Band]:
    """Deflate the bands ``(first, last)`` (image rows; ``last`` excluded) of ``pixels``, which
    hold the image's rows from ``row_offset`` on (packed RGB, or with ``bgrx`` the X server's
    32-bit BGRX layout). Several bands are deflated in parallel threads."""
    view = memoryview(pixels).cast("B")
    if len(bounds) <= 1:
        return [_deflate_band(view, width, lo, hi, row_offset, level, bgrx) for lo, hi in bounds]
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="png")
    futures = [
        _pool.submit(_deflate_band, view, width, lo, hi, row_offset, level, bgrx)
        for lo, hi in bounds
    ]
    return [future.result() for future in futures]


def assemble_png(width: int, height: int, bands: Sequence[Band]) -> bytes:
    """The RGB PNG whose image data is ``bands``, which must cover rows 0..height-1 in order.

    :raises ValueError: bands that leave a gap, overlap, or do not end at ``height``.
    """
    row = 0
    adler = 1  # the Adler-32 of nothing
    for band in bands:
        if band.first != row or band.last <= band.first:
            raise ValueError(f"band of rows {band.first}..{band.last} does not follow row {row}")
        row = band.last
        adler = adler32_combine(adler, band.adler, band.size)
    if row != height:
        raise ValueError(f"bands end at row {row}, the image has {height}")
    stream = b"".join(
        (_ZLIB_HEADER, *(band.body for band in bands), _FINAL_EMPTY_BLOCK, struct.pack("!I", adler))
    )
    header = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")


def encode_png(
    pixels: bytes | bytearray | memoryview,
    width: int,
    height: int,
    level: int = 1,
    *,
    bgrx: bool = False,
) -> bytes:
    """Encode 8-bit pixels, rows top to bottom, as an RGB PNG.

    :param pixels: packed RGB (``width * height * 3`` bytes) or, with ``bgrx``, the X server's
        32-bit BGRX layout (``width * height * 4`` bytes, as mss grabs it).
    :raises ValueError: if the buffer size does not match the dimensions.
    """
    depth = 4 if bgrx else 3
    size = memoryview(pixels).nbytes
    if size != width * depth * height or width <= 0 or height <= 0:
        raise ValueError(f"pixel buffer of {size} bytes does not match {width}x{height}x{depth}")
    count = max(1, min(_THREADS, height // _MIN_ROWS_PER_BAND))
    bounds = [(height * i // count, height * (i + 1) // count) for i in range(count)]
    return assemble_png(width, height, deflate_bands(pixels, width, bounds, level=level, bgrx=bgrx))
