"""images/desktop/desktop_ready.py on a private Xvfb: one checker for both parts of the desktop
(the Docker supervisor's ``wm panel``) announces each part as its wait ends."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

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
    checker = subprocess.Popen(
        [sys.executable, str(CHECKER), "wm", "panel", "30"],
        env={**os.environ, "DISPLAY": xserver.display},
        stdout=subprocess.PIPE,
        text=True,
    )
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
