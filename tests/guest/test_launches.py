"""Launch tracking (cubicle_guest/launches.py): startup-notification messages, a launch pending
until a window mapped after it is drawn, and the busy signal of a program that uses CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from PIL import Image
from Xlib import X, Xatom
from Xlib import display as xdisplay

from cubicle_guest.launches import (
    CpuWatch,
    LaunchWatcher,
    is_drawn,
    parse_startup_message,
    process_tree,
)
from tests.guest.late_launcher import broadcast
from tests.support.xvfb import Xvfb

pytestmark = [pytest.mark.x11]

SPIN_IN_A_CHILD = (
    "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
)


def test_startup_messages_parse_quoted_and_escaped_values() -> None:
    kind, fields = parse_startup_message(
        'new: ID="tint2/x 1" NAME=Web\\ Browser BIN=chromium SCREEN=0'
    )
    assert kind == "new"
    assert fields == {"ID": "tint2/x 1", "NAME": "Web Browser", "BIN": "chromium", "SCREEN": "0"}
    assert parse_startup_message('remove: ID=a\\"b') == ("remove", {"ID": 'a"b'})
    with pytest.raises(ValueError, match="TYPE:"):
        parse_startup_message("no type here")


def test_a_flat_window_is_not_drawn_and_any_content_is() -> None:
    flat = Image.new("RGB", (50, 50), (246, 245, 244))
    assert not is_drawn(flat)
    flat.putpixel((3, 3), (0, 0, 0))
    assert is_drawn(flat)


@pytest.fixture
def xserver() -> Iterator[Xvfb]:
    with Xvfb(320, 240).start() as server:
        yield server


def _wait_for(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_launch_is_pending_until_a_window_mapped_after_it_is_drawn(xserver: Xvfb) -> None:
    changes = threading.Event()
    watcher = LaunchWatcher(xserver.display, changes.set)
    app = xdisplay.Display(xserver.display)
    try:
        assert not watcher.pending()
        began = time.monotonic()
        broadcast(app, 'new: ID="test/app-1" NAME=App BIN=app')
        assert _wait_for(watcher.pending), "the new: message makes a launch pending"
        root = app.screen().root
        window = root.create_window(
            0, 0, 200, 150, 0, X.CopyFromParent, background_pixel=app.screen().white_pixel
        )
        window.change_property(app.intern_atom("WM_STATE"), app.intern_atom("WM_STATE"), 32, [1, 0])
        window.change_property(Xatom.WM_NAME, Xatom.STRING, 8, b"app")
        window.map()
        app.sync()
        time.sleep(0.4)
        assert watcher.pending(), "a mapped window of one flat colour is not drawn yet"
        assert watcher.ended_since(began) is None
        gc = window.create_gc(foreground=app.screen().black_pixel)
        window.fill_rectangle(gc, 10, 10, 50, 20)
        app.sync()
        assert _wait_for(lambda: not watcher.pending()), "drawing into it ends the launch"
        ended = watcher.ended_since(began)
        assert ended is not None and ended > began and changes.is_set()
    finally:
        watcher.close()
        app.close()


def test_a_program_using_cpu_is_busy_and_a_sleeping_one_is_not() -> None:
    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        busy, idle = CpuWatch([spinning.pid]), CpuWatch([sleeping.pid])
        time.sleep(0.1)
        assert busy.busy()
        assert not idle.busy()
        # a child's CPU counts for its parent's program (Chromium's renderers)
        parent = subprocess.Popen([sys.executable, "-c", SPIN_IN_A_CHILD], start_new_session=True)
        try:
            assert _wait_for(lambda: len(process_tree(parent.pid)) > 1, timeout=30), (
                "no child started"
            )
            family = CpuWatch([parent.pid])
            time.sleep(0.1)
            assert family.busy()
        finally:
            os.killpg(parent.pid, signal.SIGKILL)  # the parent and its spinning child
            parent.wait()
    finally:
        for process in (spinning, sleeping):
            process.kill()
            process.wait()


A_WORKER_THREAD_THEN_SLEEP = """
import threading, time
def work():
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
        pass
print("working", flush=True)
worker = threading.Thread(target=work)
worker.start()
worker.join()
print("done", flush=True)
time.sleep(30)
"""


def test_a_worker_thread_that_just_ended_does_not_make_its_program_look_idle() -> None:
    """A program whose worker thread spun a CPU and has just ended is not idle over a window in
    which it worked: the ended thread took its CPU time out of the process's total (summed per
    process, the total dropped and the window read as unused: the settle wait answered before
    the program drew its result, tests/guest/test_changes.py's ``w`` key). Once a whole window
    passes with the same threads and no work, it is idle."""
    process = subprocess.Popen(
        [sys.executable, "-c", A_WORKER_THREAD_THEN_SLEEP], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "working"
        watch = CpuWatch([process.pid])
        start = time.monotonic()
        # every 20 ms as the settle wait samples (32 samples kept: ~0.65 s), a window whose base
        # sample is taken while the worker still spins however late "done" is read (< 0.3 s)
        window = 0.3
        while time.monotonic() < start + window + 0.1:
            assert watch.idle_since(start, window) is not True, "idle while its thread spins"
            time.sleep(0.02)
        assert process.stdout.readline().strip() == "done"
        assert watch.idle_since(start, window) is False, "the window ended with the worker"
        verdicts = []
        ended = time.monotonic()
        while time.monotonic() < ended + 3 * window and True not in verdicts:
            time.sleep(0.02)
            verdicts.append(watch.idle_since(start, window))
        assert True in verdicts, verdicts
    finally:
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


WORK_THEN_SLEEP = """
import sys, time
end = time.perf_counter() + 0.3
while time.perf_counter() < end:
    pass
print("done", flush=True)
time.sleep(30)
"""


def test_the_idle_window_slides_with_the_samples() -> None:
    """A program that worked after ``start`` is idle once the last ``window`` was, although
    every earlier sample since ``start`` saw it work."""
    process = subprocess.Popen(
        [sys.executable, "-c", WORK_THEN_SLEEP], stdout=subprocess.PIPE, text=True
    )
    try:
        watch = CpuWatch([process.pid])
        start = time.monotonic()
        assert watch.idle_since(start, 0.04) is None, "no sample 40 ms old yet"
        time.sleep(0.05)
        assert watch.idle_since(start, 0.04) is False, "working"
        assert process.stdout is not None and process.stdout.readline().strip() == "done"
        stopped = time.monotonic()
        verdicts = []
        while time.monotonic() < stopped + 0.5 and True not in verdicts:
            time.sleep(0.01)
            verdicts.append(watch.idle_since(start, 0.04))
        assert True in verdicts, verdicts
        assert watch.idle_since(start, 10.0) is None, "no sample since start is 10 s old"
    finally:
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()
