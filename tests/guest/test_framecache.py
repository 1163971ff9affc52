"""The frame cache: a full-screen PNG that re-encodes only what was drawn on is, pixel for pixel,
what one grab of the screen shows — whatever drew where, and whatever drew *while* it grabbed.

A real Xvfb and real X clients (override-redirect windows, a flickering client process); each
screenshot is decoded and compared with a whole grab of the screen taken after it, when nothing
draws any more.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from Xlib import display as xdisplay
from Xlib.protocol import request

from cubicle_guest.framecache import BAND_ROWS, GRAB_TRIES
from cubicle_guest.screen import Screen
from cubicle_guest.server import FRAME_CACHE_ENV
from tests.guest.paint import Painter
from tests.support.agent import start_agent
from tests.support.processes import stop_process
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

WIDTH, HEIGHT = 640, 480
PAINT_LARGE_EVERY = 40
"""The flickering client repaints its large window every this many turns (round trips)."""


@pytest.fixture(scope="module")
def xserver() -> Iterator[Xvfb]:
    with Xvfb(WIDTH, HEIGHT) as server:
        yield server


@pytest.fixture
def screen(xserver: Xvfb) -> Iterator[Screen]:
    screen = Screen(xserver.display, WIDTH, HEIGHT)
    yield screen
    screen.close()


@pytest.fixture
def painter(xserver: Xvfb) -> Iterator[Painter]:
    with Painter(xserver.display) as painting:
        painting.rect(0, 0, WIDTH, HEIGHT, 0x202020)
        yield painting


def _pixels(png: bytes) -> bytes:
    with Image.open(io.BytesIO(png)) as image:
        assert (image.format, image.mode, image.size) == ("PNG", "RGB", (WIDTH, HEIGHT))
        return image.tobytes()


def _whole(screen: Screen) -> bytes:
    """The screen now, from one grab, decoded the way a PNG decodes (RGB)."""
    return screen.grab_image().tobytes()


def _cache(screen: Screen) -> Any:
    cache = screen.frame_cache
    assert cache is not None, "this Xvfb has DAMAGE: the screen must keep a frame cache"
    return cache


def _band_rows(top: int, bottom: int) -> int:
    """Rows of the bands that rows ``top..bottom-1`` touch (clipped to the screen)."""
    first, last = max(0, top) // BAND_ROWS, (min(HEIGHT, bottom) - 1) // BAND_ROWS
    return min(HEIGHT, (last + 1) * BAND_ROWS) - first * BAND_ROWS


def test_each_screenshot_is_the_screen_as_windows_open_move_recolour_and_close(
    screen: Screen, painter: Painter
) -> None:
    rng = random.Random(19)
    first = screen.screenshot()
    assert _pixels(first.data) == _whole(screen)
    assert _cache(screen).encoded_rows == HEIGHT  # the first one is encoded whole
    windows: list[tuple[Any, int, int]] = []  # window, top, height
    for step in range(60):
        action = rng.choice(["open", "open", "recolour", "move", "close"]) if windows else "open"
        if action == "open":
            x, y = rng.randrange(WIDTH - 1), rng.randrange(HEIGHT - 1)
            w, h = rng.randint(1, WIDTH - x), rng.randint(1, min(90, HEIGHT - y))
            windows.append((painter.rect(x, y, w, h, rng.getrandbits(24)), y, h))
            touched = (y, y + h)
        elif action == "recolour":
            window, top, height = rng.choice(windows)
            painter.recolor(window, rng.getrandbits(24))
            touched = (top, top + height)
        elif action == "move":
            index = rng.randrange(len(windows))
            window, top, height = windows[index]
            new_top = rng.randrange(-height + 1, HEIGHT)
            window.configure(x=rng.randrange(-50, WIDTH), y=new_top)
            painter.display.sync()
            windows[index] = (window, new_top, height)
            touched = (min(top, new_top), max(top, new_top) + height)
        else:
            window, top, height = windows.pop(rng.randrange(len(windows)))
            window.destroy()
            painter.windows.remove(window)
            painter.display.sync()
            touched = (top, top + height)
        shot = screen.screenshot()
        assert _pixels(shot.data) == _whole(screen), f"step {step} ({action}): stale pixels"
        encoded = _cache(screen).encoded_rows
        assert 0 < encoded <= _band_rows(*touched), (
            f"step {step} ({action} over rows {touched}): {encoded} rows re-encoded"
        )


def test_a_screen_nothing_drew_on_is_not_grabbed_again(screen: Screen, painter: Painter) -> None:
    painter.rect(10, 10, 50, 50, 0xFF0000)
    first = screen.screenshot()
    second = screen.screenshot()
    assert second.data == first.data
    assert (_cache(screen).grabbed_rows, _cache(screen).encoded_rows) == (0, 0)
    window = painter.rect(300, 200, 20, 20, 0x00FF00)
    third = screen.screenshot()
    assert _pixels(third.data) == _whole(screen)
    assert _cache(screen).encoded_rows == _band_rows(200, 220)
    painter.recolor(window, 0x0000FF)  # drawn again, in the same place
    assert Image.open(io.BytesIO(screen.screenshot().data)).getpixel((310, 210)) == (0, 0, 255)


def _drawing_before_each_grab(
    screen: Screen, draw: Callable[[int], None]
) -> Callable[[int, int], bytearray]:
    """A grab that first has ``draw(n)`` (the n-th grab) paint something, then grabs: drawing
    that lands between the cache's first look at the damage and its grab, every time."""
    count = 0

    def grab(top: int, bottom: int) -> bytearray:
        nonlocal count
        draw(count)
        count += 1
        return screen._grab_rows(top, bottom)

    return grab


def test_drawing_during_the_grab_outside_the_grabbed_rows_is_not_torn(
    screen: Screen, painter: Painter
) -> None:
    big = painter.rect(100, 160, 500, HEIGHT - 160, 0xFF0000)  # bands 5 to the last
    small = painter.rect(0, HEIGHT - 20, 50, 10, 0x00FF00)  # in the last band only
    cache = _cache(screen)
    cache.png(screen._grab_rows)
    painter.recolor(small, 0xFFFF00)  # what the cache sees first: the last band

    def paint_the_big_window_blue(_count: int) -> None:
        painter.recolor(big, 0x0000FF)

    png = cache.png(_drawing_before_each_grab(screen, paint_the_big_window_blue))
    pixels = _pixels(png)
    assert pixels == _whole(screen), "the kept bands of the big window are from before the grab"
    assert cache.grabbed_rows == _band_rows(160, HEIGHT)  # grabbed again over the late damage


def test_drawing_that_keeps_landing_outside_the_grab_ends_in_a_whole_grab(
    screen: Screen, painter: Painter
) -> None:
    top = painter.rect(0, 0, 40, 10, 0x00FF00)  # the first band
    bottom = painter.rect(0, HEIGHT - 10, 40, 10, 0x00FF00)  # the last band
    cache = _cache(screen)
    cache.png(screen._grab_rows)
    painter.recolor(bottom, 0xFF00FF)

    def paint_the_other_end(count: int) -> None:  # always outside the rows about to be grabbed
        painter.recolor(top if count % 2 == 0 else bottom, 0x111111 * (count + 1))

    png = cache.png(_drawing_before_each_grab(screen, paint_the_other_end))
    assert _pixels(png) == _whole(screen)
    assert cache.grabbed_rows == HEIGHT  # the last of GRAB_TRIES tries took the whole screen
    painter.display.sync()
    assert GRAB_TRIES >= 2


def test_a_client_repainting_flat_out_is_never_shown_half_repainted(
    xserver: Xvfb, screen: Screen, painter: Painter
) -> None:
    # two windows, each repainted whole in one request, red/blue: a small one in the last band as
    # fast as the server goes, a large one over most bands now and then (what a screenshot sees
    # first is then often the small one alone, while the large one may be repainted before the
    # grab); a screenshot may show either colour of each, never both colours in one window
    boxes = [(100, 100, 500, HEIGHT - 100), (0, HEIGHT - 20, 60, 20)]
    every = [PAINT_LARGE_EVERY, 1]
    flicker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.guest.flicker",
            xserver.display,
            *(f"{','.join(map(str, box))}@{n}" for box, n in zip(boxes, every, strict=True)),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert flicker.stdout is not None
        assert flicker.stdout.readline() == b"ready\n"
        seen: set[tuple[int, ...]] = set()
        for shot_number in range(300):
            with Image.open(io.BytesIO(screen.screenshot().data)) as image:
                for x, y, w, h in boxes:
                    colours = image.crop((x, y, x + w, y + h)).getcolors(4)
                    assert colours is not None and len(colours) == 1, (
                        f"screenshot {shot_number}: window at {(x, y, w, h)} shows {colours}"
                    )
                    colour = colours[0][1]
                    assert isinstance(colour, tuple)
                    seen.add(colour)
    finally:
        stop_process(flicker)
    assert seen == {(255, 0, 0), (0, 0, 255)}  # the windows did change between screenshots


def test_without_damage_every_screenshot_is_encoded_whole() -> None:
    with Xvfb(WIDTH, HEIGHT, arguments=["-extension", "DAMAGE"]) as server:
        screen = Screen(server.display, WIDTH, HEIGHT)
        try:
            assert screen.frame_cache is None
            with Painter(server.display) as painter:
                window = painter.rect(5, 5, 30, 30, 0xFF0000)
                assert _pixels(screen.screenshot().data) == _whole(screen)
                painter.recolor(window, 0x00FF00)
                assert _pixels(screen.screenshot().data) == _whole(screen)
        finally:
            screen.close()


def test_a_cache_whose_x_connection_is_gone_falls_back_to_whole_screenshots(
    xserver: Xvfb, screen: Screen, painter: Painter
) -> None:
    window = painter.rect(5, 5, 30, 30, 0xFF0000)
    screen.screenshot()
    killer = xdisplay.Display(xserver.display)
    try:  # the X server closes the cache's connection (as if it had failed)
        request.KillClient(display=killer.display, resource=_cache(screen)._rows._damage)
        killer.sync()
    finally:
        killer.close()
    painter.recolor(window, 0x00FF00)
    assert _pixels(screen.screenshot().data) == _whole(screen)
    assert screen.frame_cache is None
    painter.recolor(window, 0x0000FF)
    assert _pixels(screen.screenshot().data) == _whole(screen)


@pytest.mark.parametrize(("setting", "method"), [("", "incremental"), ("off", "whole")])
def test_the_agent_says_how_it_encodes_and_shows_each_change_at_once(
    xserver: Xvfb, painter: Painter, tmp_path: Path, setting: str, method: str
) -> None:
    window = painter.rect(200, 100, 80, 20, 0xFF0000)
    env = {FRAME_CACHE_ENV: setting} if setting else {}
    with (
        start_agent(xserver.display, tmp_path, extra_env=env) as agent,
        agent.client() as client,
    ):
        assert client.hello()["screenshot_method"] == method
        reference = Screen(xserver.display, WIDTH, HEIGHT, incremental=False)
        try:
            for colour in (0x00FF00, 0x0000FF, 0xFFFFFF):  # a change, then at once a screenshot
                painter.recolor(window, colour)
                assert _pixels(client.screenshot().blob) == _whole(reference)
        finally:
            reference.close()
