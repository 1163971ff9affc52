"""Guest-written text on a person's terminal (LG1): ``cubicle logs`` shows the guest's control
sequences as visible escapes — no OSC 52 clipboard write, no clear-screen, no carriage return
that overprints a line with a fake ``cubicle:`` one."""

from __future__ import annotations

import pytest

from tests.orchestrator.conftest import CliRun, Tracker

pytestmark = [pytest.mark.attack, pytest.mark.docker]

HOSTILE = "\x1b]52;c;aGVsbG8=\x07\x1b[2J\rcubicle: all checks passed\u202e\n"


def test_cubicle_logs_shows_guest_escapes_instead_of_sending_them(
    sandboxes: Tracker, cli: CliRun
) -> None:
    sandbox = sandboxes.create()
    written = sandbox.exec(["sh", "-c", 'printf "%s" "$1" > /proc/1/fd/1', "sh", HOSTILE])
    assert written.exit_code == 0, written.stderr
    shown = cli("logs", sandbox.id)
    assert shown.returncode == 0, shown.stderr
    assert "\\x1b]52;c;aGVsbG8=\\x07\\x1b[2J\\x0dcubicle: all checks passed\\u202e" in shown.stdout
    assert not any(c in shown.stdout for c in "\x1b\x07\r\u202e")
