"""guest.png writes PNGs that a standard decoder reads back pixel-exact."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image

from guest.png import encode_png


@pytest.mark.parametrize(("width", "height"), [(1, 1), (3, 200), (257, 129), (640, 1000)])
def test_png_round_trips_exactly(width: int, height: int) -> None:
    rng = random.Random(width * 7919 + height)
    pixels = bytes(
        rng.getrandbits(8) if rng.random() < 0.3 else 17 for _ in range(width * height * 3)
    )
    image = Image.open(io.BytesIO(encode_png(pixels, width, height)))
    image.load()  # verifies CRCs and the zlib stream, including its Adler-32
    assert (image.format, image.mode, image.size) == ("PNG", "RGB", (width, height))
    assert image.tobytes() == pixels


def test_png_rejects_a_buffer_of_the_wrong_size() -> None:
    with pytest.raises(ValueError, match="does not match 2x2x3"):
        encode_png(b"\0" * 11, 2, 2)


def test_png_from_bgrx_swaps_channels_and_drops_padding() -> None:
    width, height = 300, 260  # several bands
    bgrx = bytes(v for i in range(width * height) for v in (i % 256, (i // 7) % 256, 200, 99))
    image = Image.open(io.BytesIO(encode_png(bgrx, width, height, bgrx=True)))
    image.load()
    expected = bytes(v for i in range(width * height) for v in (200, (i // 7) % 256, i % 256))
    assert image.tobytes() == expected
