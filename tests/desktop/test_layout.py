"""The desktop's static contracts, checked on the sources (no guest needed): the panel layout
that tests and drills click agrees with tint2's configuration, the clock never shows seconds,
nothing that runs in a guest disables Chromium's sandbox, and the guest's seccomp profile is
Docker's default plus the documented additions only."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path

import pytest

from cubicle.orchestrator.desktop import DESKTOP_DIR, PANEL, desktop_files
from cubicle.orchestrator.providers import guest_build
from cubicle.orchestrator.providers.docker import image as docker_image
from cubicle.orchestrator.providers.docker import seccomp as docker_seccomp

REPO = Path(__file__).resolve().parents[2]


def tint2_settings() -> dict[str, list[str]]:
    """``key -> [values in order]`` of images/desktop/tint2rc."""
    settings: dict[str, list[str]] = {}
    for line in (DESKTOP_DIR / "tint2rc").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_panel_layout_matches_the_tint2_configuration() -> None:
    tint2 = tint2_settings()
    assert tint2["panel_position"] == ["bottom left horizontal"]
    assert tint2["panel_size"] == [f"100% {PANEL.height}"]
    assert tint2["panel_items"][0].startswith("L"), "the launchers must come first"
    panel_x, panel_y, _spacing = map(int, tint2["panel_padding"][0].split())
    launcher_x, launcher_y, launcher_spacing = map(int, tint2["launcher_padding"][0].split())
    assert panel_x + launcher_x == PANEL.padding_x
    assert launcher_spacing == PANEL.icon_spacing
    assert int(tint2["launcher_icon_size"][0]) == PANEL.icon_size
    # tint2 fits the icon in the panel's height less both paddings: it must not shrink it
    assert PANEL.height - 2 * (panel_y + launcher_y) >= PANEL.icon_size
    background = tint2["background_color"][0].split()[0]
    assert background == "#{:02x}{:02x}{:02x}".format(*PANEL.background)
    apps = [Path(value).name for value in tint2["launcher_item_app"]]
    assert apps == [launcher.desktop_file for launcher in PANEL.launchers]
    for app in apps:
        assert (DESKTOP_DIR / "applications" / app).is_file(), app


def test_launcher_geometry_for_any_screen() -> None:
    for screen in ((1280, 800), (1024, 768), (1920, 1080), (800, 600)):
        boxes = [PANEL.launcher_box(launcher.name, screen) for launcher in PANEL.launchers]
        for left, top, right, bottom in boxes:
            assert right - left == bottom - top == PANEL.icon_size
            assert PANEL.top(screen) <= top and bottom <= screen[1]
        assert all(a[2] + PANEL.icon_spacing == b[0] for a, b in itertools.pairwise(boxes))
    assert PANEL.launcher_center("editor", (1280, 800)) == (54, 780)
    with pytest.raises(KeyError, match="no launcher 'calculator' on the panel"):
        PANEL.launcher("calculator")


def test_the_clock_shows_minutes_not_seconds() -> None:
    """tint2 redraws a clock whose format has no seconds once a minute: an idle desktop is
    still. Any seconds conversion (%S %T %r %X %s %c) would redraw it every second."""
    formats = tint2_settings()["time1_format"]
    assert formats == ["%H:%M"]
    assert not re.search(r"%[STrXsc]", formats[0])


def test_nothing_run_in_a_guest_disables_chromiums_sandbox() -> None:
    """Guest-side files: the image sources, the drill's scripts and guest files, the agent.
    (Host tests that run a browser as root are outside this rule.)"""
    tracked = subprocess.run(
        ["git", "ls-files", "images", "cubicle_guest", "cubicle", "vagrant"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    offenders = [
        name for name in tracked if "--no-sandbox" in (REPO / name).read_text(errors="replace")
    ]
    assert offenders == []


def test_both_images_are_built_from_the_same_desktop_files() -> None:
    files = desktop_files()
    assert {"install", "openbox-rc.xml", "tint2rc", "desktop_ready.py"} <= set(files)
    in_docker = {
        name.removeprefix("desktop/"): path
        for name, path in docker_image.image_inputs().items()
        if name.startswith("desktop/")
    }
    assert in_docker == files
    # the VM build stages and hashes the same shared files (guest_build.guest_files)
    shared = {n.removeprefix("desktop/"): p for n, p in guest_build.guest_files(REPO).items()}
    assert {n: p for n, p in shared.items() if n in files} == files
    install = (DESKTOP_DIR / "install").read_text()
    for name in files:
        if not name.startswith("applications/") and name != "install":
            assert f'"$src/{name}"' in install, f"install does not put {name} in place"


def test_seccomp_profile_is_dockers_default_plus_the_chromium_rules() -> None:
    default = docker_seccomp.default_profile()
    profile = json.loads(docker_seccomp.guest_profile())
    added = profile["syscalls"][len(default["syscalls"]) :]
    assert profile["syscalls"][: len(default["syscalls"])] == default["syscalls"]
    assert {k: v for k, v in profile.items() if k != "syscalls"} == {
        k: v for k, v in default.items() if k != "syscalls"
    }
    assert added == list(docker_seccomp.CHROMIUM_SANDBOX_RULES)
    assert sorted(name for rule in added for name in rule["names"]) == [
        "chroot",
        "clone",
        "unshare",
    ]
    assert all(rule["comment"].startswith("cubicle: ") for rule in added)
    # namespace flags: user, PID and network pass; mount, UTS, IPC and cgroup stay refused
    for rule in added:
        for arg in rule["args"]:
            refused = arg["value"]
            assert arg["op"] == "SCMP_CMP_MASKED_EQ" and arg["valueTwo"] == 0
            assert refused & docker_seccomp.CLONE_NEWUSER == 0
            assert refused & docker_seccomp.CLONE_NEWNS
            assert refused & docker_seccomp.CLONE_NEWIPC
            assert refused & docker_seccomp.CLONE_NEWUTS
            assert refused & docker_seccomp.CLONE_NEWCGROUP


def test_the_desktop_page_states_the_launcher_positions() -> None:
    page = (REPO / "docs" / "desktop.md").read_text()
    for launcher in PANEL.launchers:
        x, y = PANEL.launcher_center(launcher.name, (1280, 800))
        assert f"({x}, {y})" in page, (
            f"docs/desktop.md does not give the {launcher.name} at ({x}, {y})"
        )


def test_the_panel_shows_no_tooltips() -> None:
    """A tooltip would change the screen half a second after a click on the panel."""
    tint2 = tint2_settings()
    assert tint2["launcher_tooltip"] == ["0"] and tint2["task_tooltip"] == ["0"]
    assert tint2.get("clock_tooltip", [""]) == [""]
