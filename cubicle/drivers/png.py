"""Read a PNG's size from its header, and build/parse ``data:image/png;base64,`` URLs (pure)."""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Final

__all__ = ["DATA_URL_PREFIX", "PngError", "data_url", "png_size", "png_size_from_data_url"]

DATA_URL_PREFIX: Final = "data:image/png;base64,"
_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


class PngError(ValueError):
    """Bytes or a URL that are not a PNG; the message says what was seen."""


def png_size(data: bytes) -> tuple[int, int]:
    """Return ``(width, height)`` from a PNG's IHDR chunk.

    :raises PngError: not a PNG (wrong signature, or no IHDR as the first chunk).
    """
    if len(data) < 24 or not data.startswith(_SIGNATURE):
        raise PngError(f"not a PNG: starts with {data[:8]!r}")
    if data[12:16] != b"IHDR":
        raise PngError(f"PNG's first chunk is {data[12:16]!r}, expected b'IHDR'")
    width, height = struct.unpack("!II", data[16:24])
    return int(width), int(height)


def data_url(png: bytes) -> str:
    return DATA_URL_PREFIX + base64.b64encode(png).decode("ascii")


def png_size_from_data_url(url: str) -> tuple[int, int]:
    """Size of the PNG inside a ``data:image/png;base64,`` URL.

    :raises PngError: another scheme or media type, bad base64, or not a PNG.
    """
    if not url.startswith(DATA_URL_PREFIX):
        raise PngError(f"image_url does not start with {DATA_URL_PREFIX!r}: {url[:40]!r}")
    # the header (8-byte signature + IHDR) lives in the first 33 bytes: decode a prefix only
    head = url[len(DATA_URL_PREFIX) : len(DATA_URL_PREFIX) + 44]
    try:
        raw = base64.b64decode(head, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PngError(f"image_url is not valid base64 ({exc})") from None
    return png_size(raw)
