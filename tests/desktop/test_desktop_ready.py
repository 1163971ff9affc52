"""images/desktop/desktop_ready.py on a private Xvfb: one checker for both parts of the desktop
(the Docker supervisor's ``wm panel``) announces each part as its wait ends."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from Xlib import X, Xatom, display

from tests.orchestrator.conftest import REPO
from tests.support.xvfb import Xvfb

CHECKER = REPO / "images" / "desktop" / "desktop_ready.py"


@pytest.fixture
def xserver() -> Iterator[Xvfb]:
    with Xvfb(640, 480) as server:
        yield server


def _check(xserver: Xvfb, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), *args],
        env={**os.environ, "DISPLAY": xserver.display},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _start_checker(xserver: Xvfb) -> subprocess.Popen[str]:
    """The supervisor's way: ``wm panel`` in one process, each part announced on stdout."""
    return subprocess.Popen(
        [sys.executable, str(CHECKER), "wm", "panel", "30"],
        env={**os.environ, "DISPLAY": xserver.display},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_wm_then_panel_in_one_process_announces_each_part(xserver: Xvfb) -> None:
    late = _check(xserver, "wm", "0.2")  # a bare X server; one part alone is not announced
    assert (late.returncode, late.stdout) == (1, ""), late.stderr
    assert "no window manager within" in late.stderr

    openbox = subprocess.Popen(
        ["openbox", "--sm-disable"],
        env={**os.environ, "DISPLAY": xserver.display},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checker = _start_checker(xserver)
    try:
        assert checker.stdout is not None
        # "wm ready" comes while it still waits for the panel: the caller starts tint2 then
        assert checker.stdout.readline() == "wm ready\n"
        assert checker.poll() is None
    finally:
        for process in (checker, openbox):
            process.terminate()
            process.wait(timeout=10)
        if checker.stdout is not None:
            checker.stdout.close()


@pytest.mark.parametrize("args", [["panel", "wm"], ["wm", "wm"], ["desk"], [], ["wm", "x1"]])
def test_bad_arguments_exit_2_with_the_usage(xserver: Xvfb, args: list[str]) -> None:
    refused = _check(xserver, *args)
    assert refused.returncode == 2 and "usage: desktop_ready.py" in refused.stderr, refused


def test_the_wm_is_ready_once_it_has_also_set_the_desktops_the_panel_reads(
    xserver: Xvfb,
) -> None:
    """A window manager that has named its check window but not yet set
    ``_NET_NUMBER_OF_DESKTOPS`` (openbox between taking the screen and loading its
    configuration) is not ready: tint2 started then sleeps a second. Setting the property wakes
    a waiting checker."""
    dpy = display.Display(xserver.display)
    try:
        root = dpy.screen().root
        check = root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
        root.change_property(
            dpy.intern_atom("_NET_SUPPORTING_WM_CHECK"), Xatom.WINDOW, 32, [check.id]
        )
        dpy.sync()
        half = _check(xserver, "wm", "0.3")
        assert half.returncode == 1 and "no window manager within" in half.stderr, half

        waiting = _start_checker(xserver)
        try:
            assert waiting.stdout is not None
            root.change_property(
                dpy.intern_atom("_NET_NUMBER_OF_DESKTOPS"), Xatom.CARDINAL, 32, [1]
            )
            dpy.sync()
            assert waiting.stdout.readline() == "wm ready\n"
        finally:
            waiting.terminate()
            waiting.wait(timeout=10)
            if waiting.stdout is not None:
                waiting.stdout.close()
        assert _check(xserver, "wm", "5").returncode == 0
    finally:
        dpy.close()
