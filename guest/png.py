"""A fast lossless PNG writer for screenshots (standard library zlib only).

Pillow's PNG encoder runs an adaptive per-row filter search, which costs more than the
compression itself on a 1280x800 screen (tens of ms). Screenshots are sent on every model step,
so this writer uses filter type 0 (None) and zlib level 1, and deflates horizontal bands of the
image in parallel threads (zlib releases the GIL), joining them into one valid zlib stream:
every band but the last ends with a full flush (byte-aligned, not final), the last finishes the
stream, and the Adler-32 is computed over the whole filtered data. Any PNG decoder reads it.
"""

from __future__ import annotations

import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Final

__all__ = ["encode_png"]

_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_MIN_ROWS_PER_BAND: Final = 128
_BANDS: Final = max(1, min(4, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None


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


def _deflate_band(
    pixels: memoryview, width: int, first: int, last: int, *, final: bool, level: int, bgrx: bool
) -> tuple[bytes, bytes]:
    if bgrx:  # convert this band only, in this worker (Pillow releases the GIL while unpacking)
        from PIL import Image  # noqa: PLC0415 - Pillow only for the BGRX input

        band = pixels[first * width * 4 : last * width * 4]
        rgb = Image.frombuffer(
            "RGB",
            (width, last - first),
            band,  # type: ignore[arg-type]
            "raw",
            "BGRX",
            0,
            1,
        ).tobytes()
        data = _filtered(rgb, width * 3, 0, last - first)
    else:
        data = _filtered(pixels, width * 3, first, last)
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = compressor.compress(data) + compressor.flush(
        zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH
    )
    return data, body


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
    view = memoryview(pixels).cast("B")
    if len(view) != width * depth * height or width <= 0 or height <= 0:
        raise ValueError(
            f"pixel buffer of {len(view)} bytes does not match {width}x{height}x{depth}"
        )
    bands = max(1, min(_BANDS, height // _MIN_ROWS_PER_BAND))
    bounds = [
        (height * i // bands, height * (i + 1) // bands, i == bands - 1) for i in range(bands)
    ]
    if bands == 1:
        results = [_deflate_band(view, width, 0, height, final=True, level=level, bgrx=bgrx)]
    else:
        global _pool
        if _pool is None:
            _pool = ThreadPoolExecutor(_BANDS, thread_name_prefix="png")
        futures = [
            _pool.submit(_deflate_band, view, width, lo, hi, final=final, level=level, bgrx=bgrx)
            for lo, hi, final in bounds
        ]
        results = [future.result() for future in futures]
    adler = 1
    for data, _ in results:
        adler = zlib.adler32(data, adler)
    stream = b"\x78\x01" + b"".join(body for _, body in results) + struct.pack("!I", adler)
    header = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return _SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", stream) + _chunk(b"IEND", b"")
