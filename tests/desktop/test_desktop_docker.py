"""The desktop a model drives, in a fresh Docker sandbox: the panel is in the first screenshot,
its launchers open their apps where a model would click them, emoji are drawn in colour, the
window-manager keys work, and Chromium runs with its own sandbox (renderers in their own user
namespace) under the guest's seccomp profile, with no GPU process that fails to start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.providers.guest_build import guest_packages
from cubicle.orchestrator.sandbox import Sandbox
from tests.desktop.checks import (
    ROOT_COLOURS,
    assert_browser_launcher_starts_a_sandboxed_chromium,
    assert_chromium_opens_a_page_without_gpu_failures,
    assert_fonts_are_never_rescanned,
    assert_launchers_drawn,
    assert_panel_drawn,
    assert_the_start_up_promises,
    click_launcher,
    colour_share,
    saturated_pixels,
    screenshot,
    wait_window,
    window_box,
)

pytestmark = [pytest.mark.docker]

APP_TIMEOUT_S = 60.0
ACTIVE_TASK = (0x5E, 0x81, 0xAC)
"""The focused window's button in the window list (images/desktop/tint2rc, background 3)."""


@pytest.fixture
def sandbox(docker_image: str) -> Iterator[Sandbox]:
    with Sandbox.create("docker") as created:
        yield created


def test_first_screenshot_shows_the_panel(sandbox: Sandbox) -> None:
    with sandbox.connect() as client:
        image = screenshot(client)
    assert image.size == (1280, 800)
    assert_panel_drawn(image)


def test_first_screenshot_shows_the_panel_at_another_screen_size(docker_image: str) -> None:
    with Sandbox.create("docker", screen=(1024, 768)) as sandbox, sandbox.connect() as client:
        image = screenshot(client)
    assert image.size == (1024, 768)
    assert_panel_drawn(image)


def test_an_idle_desktop_stays_still(sandbox: Sandbox) -> None:
    """No per-second redraws (the clock shows minutes): 2.1 s without a changed pixel. One
    change (the minute turning) still leaves such a quiet stretch within the timeout."""
    with sandbox.connect() as client:
        settled = client.settle(quiet_ms=2100, timeout_ms=4500, timeout=30)
    assert settled.result["settled"], settled.result


@pytest.mark.parametrize("name", [launcher.name for launcher in PANEL.launchers])
def test_a_click_on_a_launcher_opens_its_app(sandbox: Sandbox, name: str) -> None:
    launcher = PANEL.launcher(name)
    with sandbox.connect() as client:
        before = screenshot(client)
        click_launcher(client, name)
        window = wait_window(client, launcher.wm_class, APP_TIMEOUT_S)
        client.settle(quiet_ms=500, timeout_ms=20_000, timeout=60)
        after = screenshot(client)
    width, height = after.size
    top = PANEL.top(after.size)
    # maximized in the work area: the panel stays visible below it
    assert window["y"] + window["height"] <= top, window
    assert window["width"] >= width - 10 and window["height"] >= top - 60, window
    box = window_box(window)
    assert colour_share(before, box, ROOT_COLOURS) > 0.95
    assert colour_share(after, box, ROOT_COLOURS) < 0.05, f"{name}'s window is not drawn"
    # the window list shows the new window as the focused one; the launchers are still there
    window_list = (PANEL.launcher_box("browser", after.size)[2], top, width, height)
    tasks = colour_share(after, window_list, {ACTIVE_TASK})
    assert tasks > 0.02, f"no focused window's button in the window list ({tasks:.1%})"
    assert_launchers_drawn(after)


def test_an_emoji_typed_into_the_editor_is_drawn_in_colour(sandbox: Sandbox) -> None:
    with sandbox.connect() as client:
        click_launcher(client, "editor")
        window = wait_window(client, "Mousepad", APP_TIMEOUT_S)
        client.settle(quiet_ms=500, timeout_ms=20_000, timeout=60)
        box = window_box(window)
        plain = saturated_pixels(screenshot(client), box)
        client.type("😀🎉🌈🍎🚀", timeout=60)
        client.settle(quiet_ms=500, timeout_ms=20_000, timeout=60)
        typed = saturated_pixels(screenshot(client), box)
    # five emoji at the editor's font size: hundreds of strongly coloured pixels; boxes (no
    # emoji font) or monochrome glyphs would add none
    assert typed - plain > 300, (plain, typed)


def test_window_manager_keys_switch_and_close_windows(sandbox: Sandbox) -> None:
    with sandbox.connect() as client:
        click_launcher(client, "terminal")
        terminal = wait_window(client, "XTerm", APP_TIMEOUT_S)
        click_launcher(client, "editor")
        wait_window(client, "Mousepad", APP_TIMEOUT_S)
        client.keypress(["ALT", "TAB"], timeout=30)
        assert wait_window(client, "XTerm", 10)["id"] == terminal["id"]
        client.keypress(["ALT", "F4"], timeout=30)
        wait_window(client, "Mousepad", 10)
        classes = [w["wm_class"] for w in client.windows(timeout=30).result["windows"]]
    assert not any("XTerm" in c for c in classes), classes


CARET_PAGE = b"""<!DOCTYPE html><html><head><title>loading</title></head><body>
<input id="field" style="font-size: 24px" value="caret">
<script>
const field = document.getElementById("field");
field.focus();
document.title = "caret probe " + (document.activeElement === field ? "focused" : "not focused");
</script></body></html>"""
"""A page whose text field takes the focus, titled once it has it."""
STILL: dict[str, Any] = {"quiet_ms": 2100, "timeout_ms": 8000}
"""A settle that needs 2.1 s without a changed pixel: a blinking caret redraws every ~0.6 s."""


def test_a_focused_text_field_shows_a_steady_caret(sandbox: Sandbox) -> None:
    """No caret blinks (images/desktop/gtk-settings.ini), in the editor nor in the browser (which
    takes the blink from GTK's settings): with a text field focused, the screen keeps still."""
    page = "/home/cubicle/caret-probe.html"
    editor, browser = PANEL.launcher("editor").wm_class, PANEL.launcher("browser").wm_class
    with sandbox.connect() as client:
        click_launcher(client, "editor")
        wait_window(client, editor, APP_TIMEOUT_S)
        client.type("caret", timeout=60)
        still = client.settle(**STILL, timeout=60).result
        assert still["settled"], ("the editor's caret", still)
        client.write_file(page, CARET_PAGE, timeout=30)
        click_launcher(client, "browser")
        wait_window(client, browser, APP_TIMEOUT_S)
    opened = sandbox.exec(["chromium", f"file://{page}"], timeout=APP_TIMEOUT_S)
    assert opened.exit_code == 0, opened.stderr
    with sandbox.connect() as client:
        wait_window(client, browser, APP_TIMEOUT_S, title="caret probe focused")
        still = client.settle(**STILL, timeout=60).result
        assert still["settled"], ("the browser's caret", still)


def test_the_browser_launcher_starts_a_sandboxed_chromium_without_gpu_failures(
    sandbox: Sandbox,
) -> None:
    assert_browser_launcher_starts_a_sandboxed_chromium(sandbox, APP_TIMEOUT_S)
    assert_chromium_opens_a_page_without_gpu_failures(sandbox, APP_TIMEOUT_S)


def test_the_guest_may_make_user_namespaces_but_no_mount_namespace(sandbox: Sandbox) -> None:
    """The seccomp additions are in effect and no wider than documented: a user namespace (with
    PID and network namespaces) is allowed, a mount or UTS namespace and chroot outside one are
    refused, and the container still has no capabilities."""
    allowed = sandbox.exec(["unshare", "--user", "--pid", "--net", "--fork", "true"])
    assert allowed.exit_code == 0, allowed.stderr
    for flag in ("--mount", "--uts", "--ipc", "--cgroup"):
        refused = sandbox.exec(["unshare", "--user", flag, "true"])
        assert refused.exit_code != 0 and "Operation not permitted" in refused.stderr, (
            flag,
            refused,
        )
    chroot = sandbox.exec(["/usr/sbin/chroot", "/", "true"])
    assert chroot.exit_code != 0 and "Operation not permitted" in chroot.stderr, chroot
    status = sandbox.exec(
        ["grep", "-E", "^(CapEff|CapBnd|NoNewPrivs|Seccomp):", "/proc/self/status"]
    )
    assert status.stdout.split() == [
        "CapEff:",
        "0000000000000000",
        "CapBnd:",
        "0000000000000000",
        "NoNewPrivs:",
        "1",
        "Seccomp:",
        "2",
    ], status.stdout


def test_a_dialog_keeps_its_size_centred_over_its_application(sandbox: Sandbox) -> None:
    """Applications open maximized above the panel; their dialogs are not maximized: they open
    at their own size, centred over the application, with a title bar (docs/desktop.md, window
    placement)."""
    with sandbox.connect() as client:
        click_launcher(client, "editor")
        editor = wait_window(client, "Mousepad", APP_TIMEOUT_S)
        client.keypress(["CTRL", "O"], timeout=30)
        dialog = wait_window(client, "Mousepad", APP_TIMEOUT_S, exclude=[editor["id"]])
    parent_centre = editor["x"] + editor["width"] / 2
    assert abs(parent_centre - (dialog["x"] + dialog["width"] / 2)) <= 2, (editor, dialog)
    assert dialog["width"] < editor["width"] - 50, (editor, dialog)
    assert dialog["y"] >= 15, f"no title bar above the dialog: {dialog}"


def test_the_user_files_are_private_and_openbox_comes_back(sandbox: Sandbox) -> None:
    assert_the_start_up_promises(sandbox, APP_TIMEOUT_S)
    assert "openbox exited with status -9; restarting in 0.5 s" in sandbox.logs(200)


STARTS_COMPILED = """
import sys
compiled = []
sys.addaudithook(lambda event, args: compiled.append(str(args[1])) if event == "compile" else None)
sys.path.insert(0, "/opt/cubicle")
import desktop_ready
print(sorted(name for name in compiled if name.endswith(".py")))
print("_distutils_hack" in sys.modules)
"""


def test_the_desktops_python_compiles_nothing_at_start(sandbox: Sandbox) -> None:
    """The desktop's scripts were compiled when the image was built (a script's bytecode is never
    cached, and the desktop user may not write /opt/cubicle): the supervisor runs from
    supervisor.pyc and desktop_ready imports from its cache; nothing imports setuptools' start-up
    hook. (Each compile at start is a cold VM boot's time under TCG: ~0.3 s for these two.)"""
    started = sandbox.exec(["cat", "/proc/1/cmdline"])
    assert started.stdout.split("\0")[-2:] == ["/opt/cubicle/supervisor.pyc", ""], started
    probe = sandbox.exec(["python", "-c", STARTS_COMPILED])
    assert probe.exit_code == 0, probe.stderr
    assert probe.stdout.split("\n")[:2] == ["[]", "False"], probe.stdout


def test_the_desktop_uses_the_images_font_caches(sandbox: Sandbox) -> None:
    assert_fonts_are_never_rescanned(sandbox)


def test_the_image_records_the_debian_package_versions_it_was_built_from(
    sandbox: Sandbox,
) -> None:
    """/usr/share/cubicle/debian-packages.txt names every package the guest list asks for, at
    the version dpkg has installed in the image."""
    recorded = sandbox.exec(["cat", "/usr/share/cubicle/debian-packages.txt"])
    assert recorded.exit_code == 0, recorded.stderr
    versions = dict(line.split("=", 1) for line in recorded.stdout.splitlines())
    wanted = guest_packages()
    assert set(wanted) <= set(versions), sorted(set(wanted) - set(versions))
    installed = sandbox.exec(["dpkg-query", "--show", "--showformat=${Package}=${Version}\\n"])
    assert installed.exit_code == 0, installed.stderr
    assert dict(line.split("=", 1) for line in installed.stdout.splitlines()) == versions
