"""guest agent: click and screenshot round trips, ours vs xdotool, pyautogui, scrot, import.

Both paths run side by side on the same private Xvfb, whose root window shows a synthetic desktop
(text-filled windows, a panel) so that PNG sizes and times resemble a real screen rather than a
blank one. Our paths go through the real agent process and its unix socket; the peers' are the
usual ones: spawn ``xdotool`` per action, call pyautogui in-process, spawn ``scrot``/``import``
to a file and open it with Pillow.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageOps

from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.server import FRAME_CACHE_ENV
from tests.bench.report import Report
from tests.support.agent import start_agent
from tests.support.xvfb import Xvfb, XvfbUnavailable

CLICK_TARGET_S = 0.001
SCREENSHOT_TARGET_S = 0.015


def _desktop_image(width: int, height: int) -> Image.Image:
    """A plausible desktop: a panel, two windows of text, some coloured widgets."""
    image = Image.new("RGB", (width, height), (58, 110, 165))
    draw = ImageDraw.Draw(image)
    draw.rectangle([0, height - 32, width, height], fill=(40, 40, 48))
    for index in range(8):
        draw.rectangle(
            [8 + index * 44, height - 28, 44 + index * 44, height - 4],
            fill=(90 + index * 15, 90, 140),
        )
    words = [
        "cubicle",
        "agent",
        "screenshot",
        "lossless",
        "round",
        "trip",
        "model",
        "pixel",
        "window",
    ]
    for left, top, right, bottom in (
        (40, 30, width * 3 // 5, height - 80),
        (width * 3 // 5 + 20, 60, width - 30, height // 2),
    ):
        draw.rectangle([left, top, right, bottom], fill=(250, 250, 250), outline=(120, 120, 120))
        draw.rectangle([left, top, right, top + 24], fill=(225, 228, 235))
        for line, y in enumerate(range(top + 36, bottom - 16, 18)):
            text = " ".join(words[(line + k) % len(words)] for k in range(3 + line % 9))
            draw.text((left + 12, y), text, fill=(30, 30, 30))
        draw.rectangle([right - 110, bottom - 40, right - 14, bottom - 14], fill=(50, 120, 220))
    return image


class _RootBackgrounds:
    """Root window backgrounds, uploaded once, shown by turns: ``show(i)`` repaints the whole
    screen with image ``i`` (server-side, no pixels on the wire). Owns one X connection."""

    def __init__(self, display_name: str, images: list[Image.Image]) -> None:
        from Xlib import X, display  # noqa: PLC0415 - only the bench needs an extra X client

        self.connection = display.Display(display_name)
        screen = self.connection.screen()
        self.root = screen.root
        self.pixmaps = []
        gc = self.root.create_gc()
        for image in images:
            raw = image.convert("RGBX").tobytes("raw", "BGRX")
            pixmap = self.root.create_pixmap(image.width, image.height, screen.root_depth)
            rows = max(1, 200_000 // (image.width * 4))  # under the core request size limit
            for top in range(0, image.height, rows):
                band = min(rows, image.height - top)
                pixmap.put_image(
                    gc,
                    0,
                    top,
                    image.width,
                    band,
                    X.ZPixmap,
                    24,
                    0,
                    raw[top * image.width * 4 : (top + band) * image.width * 4],
                )
            self.pixmaps.append(pixmap)
        self.show(0)

    def show(self, index: int) -> None:
        self.root.change_attributes(background_pixmap=self.pixmaps[index])
        self.root.clear_area()
        self.connection.sync()

    def close(self) -> None:
        self.connection.close()


class _Word:
    """A word-sized window (120x16 px) that :meth:`change` repaints in the other of two colours:
    what a typed word or a ticking clock changes between two model steps."""

    def __init__(self, display_name: str) -> None:
        from tests.guest.paint import Painter  # noqa: PLC0415 - bench-only X client

        self.painter = Painter(display_name)
        self.window = self.painter.rect(300, 200, 120, 16, 0x202020)
        self.turn = 0

    def change(self) -> int:
        """Repaint the word; return how many times it was."""
        self.turn += 1
        self.painter.recolor(self.window, 0x202020 if self.turn % 2 else 0xE0E0E0)
        return self.turn

    def close(self) -> None:
        self.painter.close()


def _framing_round_trip(result: dict[str, Any], blob: bytes, *, base64_json: bool) -> bytes:
    """Encode and decode one screenshot reply frame, binary blob or base64 inside the JSON."""
    if base64_json:
        message = {
            "id": 1,
            "ok": True,
            "result": {**result, "data": base64.b64encode(blob).decode("ascii")},
        }
        frame = protocol.FrameDecoder().feed(protocol.encode_frame(message))[0]
        return base64.b64decode(frame.message["result"]["data"])
    frame = protocol.FrameDecoder().feed(
        protocol.encode_frame({"id": 1, "ok": True, "result": result}, blob)
    )[0]
    return frame.blob


def _bench_clicks(report: Report, client: AgentClient, xserver: Xvfb) -> None:
    ours = report.measure(
        "click ours (socket → agent → XTEST, round trip)",
        lambda: client.click(640, 400),
        repeat=300,
    )
    report.target(ours, CLICK_TARGET_S)
    if shutil.which("xdotool"):
        env = xserver.env()
        peer = report.measure(
            "click xdotool (spawn per action: mousemove + click)",
            lambda: subprocess.run(
                ["xdotool", "mousemove", "640", "400", "click", "1"], env=env, check=True
            ),
            repeat=30,
        )
        report.ratio(ours, peer)
    else:
        report.line("xdotool not installed: peer skipped")
    os.environ["DISPLAY"] = xserver.display
    try:
        import pyautogui  # noqa: PLC0415 - the peer is imported only inside the bench
    except Exception as exc:  # pyautogui raises various errors without a usable display
        report.line(f"pyautogui unavailable: {type(exc).__name__}: {exc}")
        return
    pyautogui.PAUSE = 0
    pyautogui.FAILSAFE = False
    peer = report.measure(
        "click pyautogui (in-process Xlib, no socket)",
        lambda: pyautogui.click(640, 400),
        repeat=100,
    )
    report.ratio(ours, peer)


def _bench_screenshots(
    report: Report,
    client: AgentClient,
    xserver: Xvfb,
    scratch: Path,
    backgrounds: _RootBackgrounds,
) -> None:
    """Our screenshot in three cases (a word changed, nothing, everything), against every PNG
    encoded whole (a second agent with the frame cache off), and the peers' screenshots."""
    width, height = xserver.width, xserver.height
    size = f"{width}x{height}"
    word = _Word(xserver.display)
    try:
        ours = report.measure(
            f"screenshot {size} ours PNG lossless, a word changed since the last",
            lambda: (word.change(), client.screenshot()),
            repeat=40,
        )
        if (width, height) == (1280, 800):
            report.target(ours, SCREENSHOT_TARGET_S)
        with (
            start_agent(
                xserver.display, scratch / f"whole-{size}", extra_env={FRAME_CACHE_ENV: "off"}
            ) as whole_agent,
            whole_agent.client() as whole_client,
        ):
            today = report.measure(
                f"screenshot {size} every PNG encoded whole (the path before the frame cache), "
                "a word changed",
                lambda: (word.change(), whole_client.screenshot()),
                repeat=40,
            )
            report.ratio(ours, today)
            whole_still = report.measure(
                f"screenshot {size} every PNG encoded whole, nothing changed",
                whole_client.screenshot,
                repeat=40,
            )
    finally:
        word.close()
    still = report.measure(
        f"screenshot {size} ours PNG lossless, nothing changed since the last",
        client.screenshot,
        repeat=40,
    )
    report.ratio(still, whole_still)
    turn = [0]

    def whole_screen_changed() -> object:
        turn[0] += 1
        backgrounds.show(turn[0] % 2)
        return client.screenshot()

    everything = report.measure(
        f"screenshot {size} ours PNG lossless, the whole screen changed since the last",
        whole_screen_changed,
        repeat=40,
    )
    report.ratio(everything, today)
    reply = client.screenshot()
    jpeg = report.measure(
        f"screenshot {size} ours JPEG q80",
        lambda: client.screenshot(format="jpeg"),
        repeat=40,
    )
    jpeg_bytes = len(client.screenshot(format="jpeg").blob)
    b64 = report.measure(
        f"screenshot {size} ours PNG, base64-in-JSON variant", lambda: _b64_call(client), repeat=40
    )
    binary_framing = report.measure(
        f"  framing only: binary frame encode+decode ({len(reply.blob) // 1024} KiB)",
        lambda: _framing_round_trip(reply.result, reply.blob, base64_json=False),
        repeat=40,
    )
    b64_framing = report.measure(
        f"  framing only: base64-in-JSON encode+decode "
        f"({len(base64.b64encode(reply.blob)) // 1024} KiB)",
        lambda: _framing_round_trip(reply.result, reply.blob, base64_json=True),
        repeat=40,
    )
    report.ratio(binary_framing, b64_framing)
    report.ratio(ours, b64)
    report.line(f"sizes {size}: PNG {len(reply.blob) // 1024} KiB, JPEG {jpeg_bytes // 1024} KiB")
    report.ratio(jpeg, ours)
    env = xserver.env()
    target = scratch / f"peer-{size}.png"
    peers: list[tuple[str, list[str]]] = []
    if shutil.which("scrot"):
        peers.append(("scrot", ["scrot", "--overwrite", str(target)]))
    if shutil.which("import"):
        peers.append(("import -window root", ["import", "-window", "root", str(target)]))
    for name, argv in peers:

        def peer_path(argv: list[str] = argv) -> None:
            subprocess.run(
                argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            with Image.open(target) as image:
                image.load()

        sample = report.measure(
            f"screenshot {size} {name} to file + PIL open", peer_path, repeat=15, warmup=1
        )
        report.ratio(ours, sample)


def _b64_call(client: AgentClient) -> bytes:
    """Our screenshot as if the protocol carried it base64 inside the JSON."""
    reply = client.screenshot()
    return _framing_round_trip(reply.result, reply.blob, base64_json=True)


def run(report: Report) -> None:
    if shutil.which("Xvfb") is None:
        raise Report.Skip("Xvfb is not installed (scripts/host-packages/x11.txt)")
    with tempfile.TemporaryDirectory(prefix="cbl-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        for width, height in ((1280, 800), (1920, 1080)):
            try:
                xserver = Xvfb(width, height).start()
            except XvfbUnavailable as exc:
                raise Report.Skip(str(exc)) from exc
            try:
                desktop = _desktop_image(width, height)
                backgrounds = _RootBackgrounds(xserver.display, [desktop, ImageOps.mirror(desktop)])
                with (
                    contextlib.closing(backgrounds),
                    start_agent(xserver.display, scratch / f"agent-{width}") as agent,
                    agent.client() as client,
                ):
                    if (width, height) == (1280, 800):
                        _bench_clicks(report, client, xserver)
                    _bench_screenshots(report, client, xserver, scratch, backgrounds)
                    info = client.info().result
                    report.line(
                        f"agent info: {json.dumps(info['screen'])}, "
                        f"screenshots {info['screenshot_method']}"
                    )
            finally:
                xserver.stop()
