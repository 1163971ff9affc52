"""Resume marks (cubicle/orchestrator/resume_marks.py) and how the ownership rule reads them:
gc spares a ready sandbox whose owner died while its mark's holder lives or its window is open,
and takes it after."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import resume_marks
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.resumable import parse_window
from cubicle.orchestrator.ownership import Stamp, parse_stamp, verdict

SANDBOX = "dk-0123456789"


@pytest.fixture(autouse=True)
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "marks"
    monkeypatch.setenv(resume_marks.DIR_ENV, str(folder))
    return folder


def _dead() -> L.Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = L.process_start_ticks(child.pid) or 1
    child.wait()
    return L.Owner(child.pid, start, socket.gethostname())


def _stamp(owner: L.Owner) -> Stamp:
    now = time.time()
    labels = L.create_labels(
        SANDBOX, "guest", owner=owner, ttl_s=3600, network="none", screen=(800, 600), now=now
    )
    return parse_stamp(labels, id_prefix="dk-")


def test_a_mark_is_private_and_reads_back(marks: Path) -> None:
    written = resume_marks.write_mark(SANDBOX, window_s=60, out=Path("/runs/x"))
    path = marks / f"{SANDBOX}.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert marks.stat().st_mode & 0o777 == 0o700
    assert resume_marks.read_mark(SANDBOX) == written
    assert written.holder == L.Owner.current() and written.out == "/runs/x"
    resume_marks.clear_mark(SANDBOX)
    resume_marks.clear_mark(SANDBOX)  # idempotent
    assert resume_marks.read_mark(SANDBOX) is None


def test_a_mark_another_user_could_have_written_is_refused(marks: Path) -> None:
    resume_marks.write_mark(SANDBOX, window_s=60, out=Path("/runs/x"))
    os.chmod(marks / f"{SANDBOX}.json", 0o666)
    with pytest.raises(ConfigError, match="refusing the host file"):
        resume_marks.read_mark(SANDBOX)
    assert resume_marks.read_mark_quietly(SANDBOX) is None  # gc: as if there were none


def test_gc_spares_a_dead_owners_sandbox_only_within_its_window_or_while_held() -> None:
    dead = _dead()
    stamp = _stamp(dead)
    now = time.time()
    ready = lambda: True  # noqa: E731
    assert verdict(stamp, ready, now) == f"its owner process {dead.pid} is gone"

    resume_marks.write_mark(SANDBOX, window_s=30, out=Path("/runs/x"), holder=dead)
    assert verdict(stamp, ready, now) is None, "within the window"
    later = now + 31
    reason = verdict(stamp, ready, later)
    assert reason is not None and "resume window passed" in reason

    resume_marks.write_mark(SANDBOX, window_s=30, out=Path("/runs/x"))  # held by this process
    assert verdict(stamp, ready, later) is None, "a live resumer holds it"


def test_a_sandbox_still_creating_or_expired_is_never_spared() -> None:
    dead = _dead()
    resume_marks.write_mark(SANDBOX, window_s=3600, out=Path("/runs/x"), holder=dead)
    stamp = _stamp(dead)
    assert verdict(stamp, lambda: False, time.time()) is not None  # orphan while creating
    assert verdict(stamp, lambda: True, stamp.expires_at + 1) == "expired"


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 1800.0), ("45s", 45.0), ("2m", 120.0), ("1.5h", 5400.0)]
)
def test_resume_window_durations(text: str, seconds: float) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "ten", "5d", ""])
def test_a_bad_resume_window_is_named(text: str) -> None:
    with pytest.raises(ConfigError, match=f"--resume-window: {text!r}"):
        parse_window(text)
