"""Screenshots show what is on the screen, at native pixels, cropped and scaled as asked."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from tests.guest.paint import Painter
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

RED, BLUE, GREEN = 0xFF0000, 0x0000FF, 0x00FF00


@pytest.fixture
def painted(xserver: Xvfb) -> Iterator[Painter]:
    with Painter(xserver.display) as painter:
        painter.rect(0, 0, 1280, 800, 0x000000)
        painter.rect(100, 50, 200, 100, RED)
        painter.rect(1230, 760, 50, 40, BLUE)
        yield painter


def _image(client: AgentClient, **args: Any) -> tuple[dict[str, object], Image.Image]:
    reply = client.screenshot(**args)
    image = Image.open(io.BytesIO(reply.blob))
    image.load()
    return reply.result, image


def test_png_screenshot_is_lossless_at_native_size(client: AgentClient, painted: Painter) -> None:
    result, image = _image(client)
    assert image.format == "PNG" and image.mode == "RGB"
    assert image.size == (1280, 800)
    assert result == {
        "native": {"width": 1280, "height": 800},
        "region": {"x": 0, "y": 0, "width": 1280, "height": 800},
        "width": 1280,
        "height": 800,
        "format": "png",
        "bytes": result["bytes"],
    }
    assert image.getpixel((100, 50)) == (255, 0, 0)
    assert image.getpixel((299, 149)) == (255, 0, 0)
    assert image.getpixel((300, 150)) == (0, 0, 0)
    assert image.getpixel((99, 49)) == (0, 0, 0)
    assert image.getpixel((1279, 799)) == (0, 0, 255)
    assert image.getpixel((1229, 759)) == (0, 0, 0)


def test_region_crops_in_native_pixels(client: AgentClient, painted: Painter) -> None:
    result, image = _image(client, region={"x": 90, "y": 40, "width": 20, "height": 30})
    assert image.size == (20, 30)
    assert result["region"] == {"x": 90, "y": 40, "width": 20, "height": 30}
    assert image.getpixel((9, 9)) == (0, 0, 0)
    assert image.getpixel((10, 10)) == (255, 0, 0)


def test_downscale_keeps_aspect_and_reports_sizes(client: AgentClient, painted: Painter) -> None:
    result, image = _image(client, max_width=640, max_height=640)
    assert image.size == (640, 400)
    assert (result["width"], result["height"]) == (640, 400)
    assert result["native"] == {"width": 1280, "height": 800}
    assert image.getpixel((100, 50)) == (255, 0, 0)  # (200, 100) native, inside the red box
    _, small = _image(client, max_height=100)
    assert small.size == (160, 100)
    _, same = _image(client, max_width=5000)
    assert same.size == (1280, 800)  # never upscaled


def test_jpeg_screenshot(client: AgentClient, painted: Painter) -> None:
    result, image = _image(client, format="jpeg", quality=90)
    assert image.format == "JPEG" and result["format"] == "jpeg"
    red = image.getpixel((200, 100))
    assert isinstance(red, tuple) and red[0] > 230 and red[1] < 25 and red[2] < 25


@pytest.mark.parametrize(
    ("args", "code", "named"),
    [
        ({"region": {"x": 1200, "y": 0, "width": 100, "height": 10}}, "out_of_bounds", "1280x800"),
        ({"region": {"x": -1, "y": 0, "width": 10, "height": 10}}, "out_of_bounds", "x=-1"),
        ({"region": {"x": 0, "y": 0, "width": 0, "height": 10}}, "bad_args", "empty"),
        ({"max_width": 0}, "bad_args", "max_width"),
        ({"quality": 50}, "bad_args", "jpeg only"),
    ],
)
def test_bad_screenshot_arguments(
    client: AgentClient, args: dict[str, Any], code: str, named: str
) -> None:
    with pytest.raises(GuestError) as caught:
        client.screenshot(**args)
    assert caught.value.code == code
    assert named in caught.value.reason


def test_settle_returns_when_screen_is_quiet(client: AgentClient, painted: Painter) -> None:
    result = client.settle(quiet_ms=200, timeout_ms=5000).result
    assert result["settled"] is True
    assert result["waited_ms"] >= 200


def test_settle_reports_a_screen_that_keeps_changing(
    client: AgentClient, painted: Painter, xserver: Xvfb
) -> None:
    stop = threading.Event()

    def flicker() -> None:
        with Painter(xserver.display) as flickering:
            box = flickering.rect(600, 400, 80, 80, GREEN)
            colour = GREEN
            while not stop.wait(0.02):
                colour = GREEN if colour == BLUE else BLUE
                flickering.recolor(box, colour)

    thread = threading.Thread(target=flicker)
    thread.start()
    try:
        changing = client.settle(quiet_ms=400, timeout_ms=800).result
        elsewhere = client.settle(
            quiet_ms=100, timeout_ms=3000, region={"x": 0, "y": 0, "width": 300, "height": 300}
        ).result
    finally:
        stop.set()
        thread.join()
    assert changing["settled"] is False
    assert elsewhere["settled"] is True  # a region away from the change is quiet
