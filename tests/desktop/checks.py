"""What the desktop tests assert, on any backend: each check takes a ready :class:`Sandbox`.

The checks look only at what a model gets (screenshots, clicks at the pixels the panel draws)
and at what the agent reports (``windows``, ``exec``), never at how the desktop was started.
Polls are bounded by a deadline and end as soon as the awaited state is there.
"""

from __future__ import annotations

import colorsys
import io
import json
import time
from collections.abc import Collection
from typing import Any, cast

from PIL import Image

from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.providers.vm.build import FONT_CACHE_PROBE
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.client import AgentClient

__all__ = [
    "ROOT_COLOURS",
    "assert_browser_launcher_starts_a_sandboxed_chromium",
    "assert_chromium_opens_a_page_without_gpu_failures",
    "assert_fonts_are_never_rescanned",
    "assert_launchers_drawn",
    "assert_panel_drawn",
    "assert_the_start_up_promises",
    "click_launcher",
    "colour_share",
    "guest_pids",
    "renderer_namespaces",
    "saturated_pixels",
    "screenshot",
    "wait_window",
    "window_box",
]

ROOT_COLOURS = {(0x3B, 0x42, 0x52), (0x2E, 0x34, 0x40)}
"""The root window's pattern (images/desktop/supervisor.py, both backends)."""
POLL_S = 0.1


def screenshot(client: AgentClient) -> Image.Image:
    """The full-size screenshot the agent returns, as RGB."""
    reply = client.screenshot(timeout=60)
    return Image.open(io.BytesIO(reply.blob)).convert("RGB")


def colour_share(image: Image.Image, box: tuple[int, int, int, int], colours: set[Any]) -> float:
    """The fraction of the pixels of ``box`` (left, top, right, bottom) whose colour is one of
    ``colours``."""
    region = image.crop(box)
    counts = region.getcolors(maxcolors=region.width * region.height) or []
    hits = sum(count for count, colour in counts if colour in colours)
    return hits / (region.width * region.height)


def saturated_pixels(image: Image.Image, box: tuple[int, int, int, int]) -> int:
    """Pixels of ``box`` with a strong colour (HSV saturation and value both above 0.45): what a
    colour emoji or a coloured icon draws, and grey text, boxes or backgrounds do not."""
    region = image.crop(box)
    counts = region.getcolors(maxcolors=region.width * region.height) or []
    total = 0
    for count, colour in counts:
        red, green, blue = cast(tuple[int, int, int], colour)
        _hue, saturation, value = colorsys.rgb_to_hsv(red / 255, green / 255, blue / 255)
        if saturation > 0.45 and value > 0.45:
            total += count
    return total


def assert_panel_drawn(image: Image.Image) -> None:
    """The panel of :data:`PANEL` is on ``image``: its strip is the panel colour (but for the
    launcher icons and the clock), every launcher icon is drawn in colour where the layout says,
    the clock's text is there, and the desktop above is the root pattern, not the panel."""
    screen = image.size
    width, height = screen
    top = PANEL.top(screen)
    strip = colour_share(image, (0, top, width, height), {PANEL.background})
    assert strip > 0.85, f"the panel strip is only {strip:.0%} panel colour: no panel drawn"
    above = colour_share(image, (0, 0, width, top), ROOT_COLOURS)
    assert above > 0.95, f"only {above:.0%} of the desktop above the panel is the root pattern"
    assert_launchers_drawn(image)
    clock = (width - 80, top, width, height)
    light = colour_share(image, clock, {(0xEC, 0xEF, 0xF4)})
    assert light > 0.01, f"no clock text at the panel's right end ({light:.1%} light pixels)"


def assert_launchers_drawn(image: Image.Image) -> None:
    """Every launcher icon of :data:`PANEL` is drawn, in colour, where the layout says."""
    for launcher in PANEL.launchers:
        box = PANEL.launcher_box(launcher.name, image.size)
        coloured = saturated_pixels(image, box)
        background = colour_share(image, box, {PANEL.background})
        assert coloured > 40 and background < 0.8, (
            f"no {launcher.name} icon at {box}: {coloured} coloured pixels, "
            f"{background:.0%} panel colour"
        )


def window_box(window: dict[str, Any]) -> tuple[int, int, int, int]:
    """``(left, top, right, bottom)`` of a window the agent's ``windows`` reported."""
    left, top = int(window["x"]), int(window["y"])
    return left, top, left + int(window["width"]), top + int(window["height"])


def wait_window(
    client: AgentClient,
    wm_class: str,
    timeout_s: float,
    *,
    focused: bool = True,
    exclude: Collection[int] = (),
    title: str = "",
) -> dict[str, Any]:
    """The first top-level window of class ``wm_class`` the agent's ``windows`` reports (with
    the input focus when ``focused``; not one whose id is in ``exclude``; whose title starts
    with ``title``), polled until ``timeout_s``; fails naming what it saw."""
    deadline = time.monotonic() + timeout_s
    while True:
        windows = client.windows(timeout=30).result["windows"]
        for window in windows:
            if (
                wm_class in window["wm_class"]
                and (window["focused"] or not focused)
                and window["id"] not in exclude
                and str(window["title"]).startswith(title)
            ):
                return dict(window)
        if time.monotonic() > deadline:
            seen = [(w["wm_class"], w["title"], w["focused"]) for w in windows]
            wanted = f"of class {wm_class!r}" + (f" titled {title!r}..." if title else "")
            raise AssertionError(f"no window {wanted} within {timeout_s} s: {seen}")
        time.sleep(POLL_S)


def click_launcher(client: AgentClient, name: str) -> None:
    """Click the panel's launcher ``name`` at the centre of its icon, as a model would."""
    hello = client.hello_result or {}
    screen = (int(hello["screen"]["width"]), int(hello["screen"]["height"]))
    x, y = PANEL.launcher_center(name, screen)
    client.click(x, y, button="left", timeout=30)


RENDERER_PROBE = """
import json, os
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        # chromium's children rewrite their command line as one space-separated string
        argv = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").split()
        found.append({"pid": int(pid), "argv": [a.decode(errors="replace") for a in argv],
                      "userns": os.readlink(f"/proc/{pid}/ns/user")})
    except OSError:
        continue
print(json.dumps(found))
"""
"""Lists the guest's processes: pid, argv (split at spaces) and user namespace
(``/proc/PID/ns/user``)."""


def renderer_namespaces(sandbox: Sandbox, timeout_s: float) -> tuple[dict[str, Any], list[Any]]:
    """The chromium browser process and its renderer processes (at least one, polled until
    ``timeout_s``), each with its pid, argv and user namespace, read through the agent's exec."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = sandbox.exec(["python3", "-c", RENDERER_PROBE], timeout=60)
        assert result.exit_code == 0, result.stderr
        processes = json.loads(result.stdout)
        chromium = [p for p in processes if p["argv"] and p["argv"][0].endswith("/chromium")]
        browsers = [p for p in chromium if not any(a.startswith("--type=") for a in p["argv"])]
        renderers = [p for p in chromium if "--type=renderer" in p["argv"]]
        if len(browsers) == 1 and renderers:
            return browsers[0], renderers
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no browser process with renderers within {timeout_s} s: "
                f"{[p['argv'][:2] for p in chromium]}; guest log:\n{sandbox.logs(40)}"
            )
        time.sleep(POLL_S * 5)


def assert_browser_launcher_starts_a_sandboxed_chromium(sandbox: Sandbox, timeout_s: float) -> None:
    """Click the panel's browser launcher; Chromium's window opens, and every renderer process
    runs in a user namespace of its own (Chromium's namespace sandbox), the browser process
    with its sandbox on."""
    with sandbox.connect(timeout=60) as client:
        click_launcher(client, "browser")
        wait_window(client, PANEL.launcher("browser").wm_class, timeout_s)
    browser, renderers = renderer_namespaces(sandbox, timeout_s)
    assert "--no-sandbox" not in browser["argv"], browser["argv"]
    for renderer in renderers:
        assert renderer["userns"] != browser["userns"], (browser, renderer)
        assert "--no-sandbox" not in renderer["argv"]


PROBE_PAGE = b"""<!DOCTYPE html><html><head><title>loading</title></head><body><script>
const gl = document.createElement("canvas").getContext("webgl");
document.title = "probe ran; webgl " + (gl ? "on" : "off");
</script></body></html>"""
"""A page whose script titles it once it ran (and says whether it got a WebGL context)."""
GPU_PROCESS_EXITED = "Exiting GPU process"
"""What Chromium logs each time its GPU process fails to start (then it starts another)."""


def assert_chromium_opens_a_page_without_gpu_failures(sandbox: Sandbox, timeout_s: float) -> None:
    """With Chromium running (the browser launcher clicked), a page it is asked to open runs
    its script, and the GPU process never failed to start: the sandbox's log, which holds the
    output of the programs the panel started, never says so (images/desktop/chromium-flags)."""
    path = "/home/cubicle/gpu-probe.html"
    # one connection at a time: a VM's agent port takes one host connection
    with sandbox.connect(timeout=60) as client:
        client.write_file(path, PROBE_PAGE, timeout=30)
    opened = sandbox.exec(["chromium", f"file://{path}"], timeout=timeout_s)
    assert opened.exit_code == 0, opened.stderr
    with sandbox.connect(timeout=60) as client:
        browser = PANEL.launcher("browser").wm_class
        wait_window(client, browser, timeout_s, focused=False, title="probe ran")
    log = sandbox.logs(5000)
    assert GPU_PROCESS_EXITED not in log, [line for line in log.splitlines() if "GPU" in line]


PIDS_NAMED = """
import os, sys
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() == sys.argv[1]:
                found.append(int(pid))
    except OSError:
        continue
print(found)
"""
"""Prints the pids of the guest's processes named ``argv[1]`` (the guest has no procps)."""
CHECKER = ["/opt/cubicle/venv/bin/python", "/opt/cubicle/desktop_ready.py"]
"""The guest's desktop checker (images/desktop/desktop_ready.py)."""


def guest_pids(sandbox: Sandbox, name: str) -> list[int]:
    """The pids of the guest's processes whose command name is ``name``."""
    done = sandbox.exec(["python3", "-c", PIDS_NAMED, name])
    assert done.exit_code == 0, done.stderr
    return cast(list[int], json.loads(done.stdout))


def assert_the_start_up_promises(sandbox: Sandbox, timeout_s: float) -> None:
    """The desktop start-up's promises, the same on every backend (images/desktop/supervisor.py):
    programs the agent starts run in the user's home, in UTF-8, and create files only their user
    can read (umask 077); openbox killed is started again (a new process) and manages the screen
    again within ``timeout_s``."""
    probe = sandbox.exec(
        [
            "sh",
            "-c",
            'pwd; echo "$LANG"; umask; f="$HOME/.umask-probe"; touch "$f"; stat -c %a "$f"; '
            'rm "$f"',
        ]
    )
    seen = probe.stdout.split()
    assert seen == ["/home/cubicle", "C.UTF-8", "0077", "600"], (probe.stdout, probe.stderr)
    (first,) = guest_pids(sandbox, "openbox")
    killed = sandbox.exec(["sh", "-c", 'kill -KILL "$1"', "sh", str(first)])
    assert killed.exit_code == 0, killed.stderr
    deadline = time.monotonic() + timeout_s
    while (now := guest_pids(sandbox, "openbox")) in ([], [first]):
        assert time.monotonic() < deadline, f"openbox was not restarted within {timeout_s} s"
        time.sleep(POLL_S)
    assert len(now) == 1 and now[0] != first, now
    managed = sandbox.exec([*CHECKER, "wm", f"{timeout_s:g}"], timeout=timeout_s + 30)
    assert managed.exit_code == 0, managed.stderr


def assert_fonts_are_never_rescanned(sandbox: Sandbox) -> None:
    """The image's fontconfig caches hold: neither the desktop's start (openbox, the panel) nor a
    new program rescanned a font folder (a rescan of every folder, CJK fonts included, took
    openbox ~4 s of a cold VM boot under TCG when the VM disk's copy had dropped the folders'
    mtime nanoseconds the caches record)."""
    done = sandbox.exec(["python3", "-I", "-c", FONT_CACHE_PROBE])  # the VM build's own probe
    assert done.exit_code == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (sorted(seen["written"]), seen["probe"]) == ([], []), json.dumps(seen, indent=1)
