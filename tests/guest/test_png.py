"""cubicle_guest.png writes PNGs that a standard decoder reads back pixel-exact."""

from __future__ import annotations

import io
import random
import zlib

import pytest
from PIL import Image

from cubicle_guest.png import adler32_combine, assemble_png, deflate_bands, encode_png


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


def test_adler32_combine_equals_the_checksum_of_the_joined_bytes() -> None:
    rng = random.Random(3)
    for first_size, second_size in [(0, 0), (0, 5), (7, 0), (1, 65521), (70_000, 140_000)]:
        first = rng.randbytes(first_size)
        second = rng.randbytes(second_size)
        combined = adler32_combine(zlib.adler32(first), zlib.adler32(second), second_size)
        assert combined == zlib.adler32(first + second), (first_size, second_size)


def test_bands_deflated_apart_in_any_grouping_join_into_one_exact_png() -> None:
    width, height = 97, 75
    rng = random.Random(11)
    pixels = bytes(
        rng.getrandbits(8) if rng.random() < 0.2 else 40 for _ in range(width * height * 3)
    )
    bounds = [(0, 1), (1, 32), (32, 64), (64, 75)]
    bands = [deflate_bands(pixels, width, [bound])[0] for bound in bounds[:2]]  # one at a time
    bands += deflate_bands(pixels[32 * width * 3 :], width, bounds[2:], row_offset=32)  # in threads
    with Image.open(io.BytesIO(assemble_png(width, height, bands))) as image:
        image.load()
        assert image.tobytes() == pixels


def test_bands_that_leave_a_gap_or_stop_short_are_refused() -> None:
    pixels = b"\x10" * (4 * 10 * 3)
    top, middle, bottom = deflate_bands(pixels, 4, [(0, 3), (3, 6), (6, 10)])
    with pytest.raises(ValueError, match=r"band of rows 6\.\.10 does not follow row 3"):
        assemble_png(4, 10, [top, bottom])
    with pytest.raises(ValueError, match="bands end at row 6, the image has 10"):
        assemble_png(4, 10, [top, middle])
