"""Viewport math: model pixels → screen pixels, bounds in model space, fit sizes (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cubicle.drivers.errors import CoordinateOutOfView, ViewportError
from cubicle.drivers.viewport import Rect, ViewGeometry, Viewport
from cubicle_guest.geometry import fit_size


def test_fit_keeps_aspect_1920x1080_into_1280x800() -> None:
    geometry = Viewport.fit(1280, 800).geometry(1920, 1080)
    assert (geometry.width, geometry.height) == (1280, 720)
    assert geometry.to_native(640, 360) == (960, 540)


def test_800x600_view_of_1600x1200_doubles() -> None:
    geometry = Viewport.fit(800, 600).geometry(1600, 1200)
    assert (geometry.width, geometry.height) == (800, 600)
    assert geometry.to_native(0, 0) == (0, 0)
    assert geometry.to_native(123, 456) == (246, 912)
    assert geometry.to_native(799, 599) == (1598, 1198)


def test_cropped_view_adds_the_offset_after_scaling() -> None:
    geometry = Viewport.fit(400, 300, crop=Rect(200, 100, 800, 600)).geometry(1600, 1200)
    assert (geometry.width, geometry.height) == (400, 300)
    assert geometry.to_native(10, 20) == (200 + 20, 100 + 40)


def test_native_view_is_identity() -> None:
    geometry = Viewport.native().geometry(1280, 800)
    assert geometry.is_identity
    assert geometry.to_native(1279, 799) == (1279, 799)


def test_fit_never_upscales() -> None:
    geometry = Viewport.fit(4000, 4000).geometry(1280, 800)
    assert (geometry.width, geometry.height) == (1280, 800)


def test_exact_size_scales_each_axis() -> None:
    geometry = Viewport.exact(1000, 1000).geometry(2000, 1000)
    assert (geometry.scale_x, geometry.scale_y) == (2.0, 1.0)
    assert geometry.to_native(500, 500) == (1000, 500)


@pytest.mark.parametrize(
    ("x", "y"),
    [(-1, 0), (0, -1), (1280, 0), (0, 720), (99999, 5)],
    ids=["x<0", "y<0", "x=width", "y=height", "huge"],
)
def test_outside_the_image_is_refused_naming_point_and_size(x: int, y: int) -> None:
    geometry = Viewport.fit(1280, 800).geometry(1920, 1080)
    with pytest.raises(CoordinateOutOfView) as caught:
        geometry.to_native(x, y, action="click")
    message = str(caught.value)
    assert f"({x}, {y})" in message
    assert "1280x720" in message
    assert message.startswith("click")


def test_scroll_distances_scale_per_axis() -> None:
    geometry = Viewport.exact(800, 300).geometry(1600, 1200)
    assert geometry.scroll_to_native(100, -100) == (200, -400)
    assert geometry.scroll_to_native(0, 0) == (0, 0)


def test_crop_outside_the_screen_is_a_viewport_error() -> None:
    with pytest.raises(ViewportError, match=r"beyond the 1280x800 screen"):
        Viewport.native(crop=Rect(1000, 0, 400, 100)).geometry(1280, 800)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Viewport.fit(0, 10),
        lambda: Viewport("fit", None, 10),
        lambda: Viewport.native(Rect(0, 0, 0, 5)),
    ],
    ids=["zero-width", "missing-width", "empty-crop"],
)
def test_bad_settings_are_refused(make: object) -> None:
    with pytest.raises(ViewportError):
        make()  # type: ignore[operator]


screens = st.tuples(st.integers(1, 4000), st.integers(1, 4000))
boxes = st.tuples(st.integers(1, 4000), st.integers(1, 4000))


@given(screens, boxes)
def test_fit_matches_the_guests_own_fit(screen: tuple[int, int], box: tuple[int, int]) -> None:
    """The driver predicts the size the agent will produce (cubicle_guest.geometry.fit_size)."""
    geometry = Viewport.fit(*box).geometry(*screen)
    assert (geometry.width, geometry.height) == fit_size(screen[0], screen[1], *box)


@st.composite
def geometry_and_point(draw: st.DrawFn) -> tuple[ViewGeometry, int, int]:
    sw, sh = draw(screens)
    cx, cy = draw(st.integers(0, sw - 1)), draw(st.integers(0, sh - 1))
    crop = Rect(cx, cy, draw(st.integers(1, sw - cx)), draw(st.integers(1, sh - cy)))
    mode = draw(st.sampled_from(["native", "fit", "exact"]))
    if mode == "native":
        viewport = Viewport.native(crop)
    else:
        size = draw(boxes)
        viewport = (
            Viewport.fit(*size, crop=crop) if mode == "fit" else Viewport.exact(*size, crop=crop)
        )
    geometry = viewport.geometry(sw, sh)
    return (
        geometry,
        draw(st.integers(0, geometry.width - 1)),
        draw(st.integers(0, geometry.height - 1)),
    )


@given(geometry_and_point())
def test_every_model_point_lands_inside_the_crop(case: tuple[ViewGeometry, int, int]) -> None:
    geometry, x, y = case
    nx, ny = geometry.to_native(x, y)
    assert geometry.crop.contains(nx, ny)
    # rounded from the exact linear map: within half a pixel, or (only when the view is
    # upscaled) held on the crop's last pixel, within one
    last_x = geometry.crop.x + geometry.crop.width - 1
    last_y = geometry.crop.y + geometry.crop.height - 1
    assert abs(nx - (geometry.crop.x + x * geometry.scale_x)) <= (1 if nx == last_x else 0.5)
    assert abs(ny - (geometry.crop.y + y * geometry.scale_y)) <= (1 if ny == last_y else 0.5)


@given(geometry_and_point())
def test_mapping_is_monotonic(case: tuple[ViewGeometry, int, int]) -> None:
    geometry, x, y = case
    if x + 1 < geometry.width:
        assert geometry.to_native(x + 1, y)[0] >= geometry.to_native(x, y)[0]
    if y + 1 < geometry.height:
        assert geometry.to_native(x, y + 1)[1] >= geometry.to_native(x, y)[1]


def test_two_geometries_coexist() -> None:
    """Geometry is a value, not global state: two views map the same point differently."""
    small = Viewport.fit(800, 600).geometry(1600, 1200)
    native = Viewport.native().geometry(1600, 1200)
    assert small.to_native(100, 100) == (200, 200)
    assert native.to_native(100, 100) == (100, 100)
