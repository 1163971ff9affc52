"""A task's set-up on a local desktop (Xvfb + openbox + agent on this host): the same code as in
a sandbox writes the task's files with their modes, starts the form server, opens the apps the
task lists and waits for their windows; its waits fail naming what they saw."""

from __future__ import annotations

import json
import stat
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from cubicle.orchestrator.drill.runner import (
    DRILL_SETTLE,
    FAILURE_SCREEN,
    SLOW_GUEST_TIME_SCALE,
    guest_time_scale,
    run_drill,
    scaled_settle,
)
from cubicle.orchestrator.modelrun.errors import GuestStepError
from cubicle.orchestrator.modelrun.guest_steps import GuestSteps
from cubicle.orchestrator.modelrun.verify import verify_task
from cubicle.orchestrator.provider import SandboxInfo
from cubicle.orchestrator.tasks import parse_task
from cubicle_guest.protocol import MAX_LAUNCH_CAP_MS, MAX_SETTLE_CAP_MS
from tests.drill.desktop import LocalDesktop

pytestmark = [pytest.mark.x11, pytest.mark.slow]

TASK = {
    "prompt": "Check the files in {WORKDIR}.",
    "setup": {
        "workdir": "~/work",
        "open": ["editor"],
        "form_server": {"port": 18804},
        "files": [
            {"path": "notes/a.txt", "content": "é\n", "mode": 0o600},
            {"path": "~/b.sh", "content": "#!/bin/sh\n", "mode": "0755"},
        ],
    },
    "checks": [
        {"file": "notes/a.txt", "equals": "é\n"},
        {"file": "{HOME}/b.sh", "contains": "#!"},
        {"file": "notes/a.txt", "contains": "absent"},
        {"form": {"name": "x"}},
    ],
}


def test_set_up_writes_files_with_modes_starts_the_form_server_and_opens_apps(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    inputs = tmp_path / "inputs"
    (inputs / "sub").mkdir(parents=True)
    (inputs / "sub" / "data.bin").write_bytes(bytes(range(256)))
    (inputs / "sub" / "data.bin").chmod(0o640)
    listed = [*TASK["setup"]["files"], {"path": "in/", "source": str(inputs)}]  # type: ignore[index]
    task = parse_task(
        {**TASK, "setup": {**TASK["setup"], "files": listed}},  # type: ignore[dict-item]
        source=None,
        default_name="local",
    )
    with local_desktop.connect() as client:
        steps = GuestSteps(client)
        try:
            guest = steps.prepare(task)
            assert guest.workdir == f"{local_desktop.home}/work"
            assert guest.prompt == f"Check the files in {local_desktop.home}/work."
            a = local_desktop.home / "work" / "notes" / "a.txt"
            b = local_desktop.home / "b.sh"
            assert a.read_bytes() == "é\n".encode() and stat.S_IMODE(a.stat().st_mode) == 0o600
            assert stat.S_IMODE(b.stat().st_mode) == 0o755
            copied = local_desktop.home / "work" / "in" / "inputs" / "sub" / "data.bin"
            assert copied.read_bytes() == bytes(range(256))
            assert stat.S_IMODE(copied.stat().st_mode) == 0o640
            windows = client.windows().result["windows"]
            assert any("Mousepad" in w["wm_class"] and w["focused"] for w in windows), windows
            body = json.dumps({"name": "x"}).encode()
            request = urllib.request.Request(
                "http://127.0.0.1:18804/submit", data=body, method="POST"
            )
            request.add_header("Content-Type", "application/json")
            with urllib.request.urlopen(request, timeout=10) as reply:
                assert reply.status == 200
            checks = verify_task(client, guest)
            assert [c.ok for c in checks] == [True, True, False, True], checks
            assert checks[2].detail.endswith("does not contain the text")
        finally:
            steps.stop_launched()


def test_the_form_server_serves_the_task_pages_of_its_work_folder_and_nothing_else(
    local_desktop: LocalDesktop,
) -> None:
    page = "<!doctype html><title>Task page é</title>"
    task = parse_task(
        {
            "prompt": "x",
            "setup": {
                "form_server": {"port": 18805},
                "files": [
                    {"path": "page.html", "content": page},
                    {"path": "sub/inner.html", "content": "inner"},
                    {"path": "notes.txt", "content": "not a page"},
                ],
            },
        },
        source=None,
        default_name="pages",
    )
    (local_desktop.home / "elsewhere.html").parent.mkdir(parents=True, exist_ok=True)
    (local_desktop.home / "elsewhere.html").write_text("outside the work folder", "utf-8")

    def get(path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:18805{path}", timeout=10) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""

    with local_desktop.connect() as client:
        steps = GuestSteps(client)
        try:
            steps.prepare(task)
            assert get("/page.html") == (200, page.encode())
            assert get("/")[0] == 200, "the form page as before"
            for path in ("/sub/inner.html", "/notes.txt", "/missing.html", "/../elsewhere.html",
                         "/%2e%2e/elsewhere.html", "/.html"):  # fmt: skip
                assert get(path)[0] == 404, path
        finally:
            steps.stop_launched()


def test_set_up_removes_what_the_checks_read_so_an_earlier_run_cannot_pass(
    local_desktop: LocalDesktop,
) -> None:
    earlier = local_desktop.home / "task" / "out.txt"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("42\n", encoding="utf-8")
    task = parse_task(
        {"prompt": "x", "checks": [{"file": "out.txt", "equals": "42\n"}]},
        source=None,
        default_name="again",
    )
    with local_desktop.connect() as client:
        guest = GuestSteps(client).prepare(task)
        assert not earlier.exists()
        (check,) = verify_task(client, guest)
        assert not check.ok and check.got is None


def test_set_up_waits_fail_clearly_and_name_what_they_saw(local_desktop: LocalDesktop) -> None:
    with local_desktop.connect() as client:
        steps = GuestSteps(client)
        with pytest.raises(GuestStepError) as waited:
            steps.wait_window("No Such Window", timeout_ms=300)
        assert "no window titled like 'No Such Window' within 300 ms; windows seen: [" in str(
            waited.value
        )
        with pytest.raises(GuestStepError) as classed:
            steps.wait_window(wm_class="NoClass", timeout_ms=100, focused=True)
        assert "no focused window of class 'NoClass' within 100 ms" in str(classed.value)
        assert steps.launched == []


def test_a_slow_guest_scales_every_set_up_wait(local_desktop: LocalDesktop) -> None:
    with local_desktop.connect() as client:
        steps = GuestSteps(client, time_scale=4.0)
        assert steps.settle(quiet_ms=50, timeout_ms=250)
        with pytest.raises(ValueError, match=r"time_scale must be >= 1\.0"):
            GuestSteps(client, time_scale=0.5)
    assert guest_time_scale(replace(_INFO, detail={"accelerator": "tcg"})) == SLOW_GUEST_TIME_SCALE
    assert guest_time_scale(replace(_INFO, detail={"accelerator": "kvm"})) == 1.0
    assert guest_time_scale(_INFO) == 1.0
    tcg = scaled_settle(SLOW_GUEST_TIME_SCALE)
    # on TCG the periods are a container's (the agent waits on the app's signals and scales
    # what is slower by its own measured speed); only the caps grow, for slow launches
    assert (tcg.expect_ms, tcg.quiet_ms, tcg.typing_quiet_ms, tcg.idle_quiet_ms) == (
        DRILL_SETTLE.expect_ms,
        DRILL_SETTLE.quiet_ms,
        DRILL_SETTLE.typing_quiet_ms,
        DRILL_SETTLE.idle_quiet_ms,
    )
    assert (tcg.cap_ms, tcg.launch_cap_ms) == (MAX_SETTLE_CAP_MS, MAX_LAUNCH_CAP_MS)
    assert scaled_settle(1.0) == DRILL_SETTLE


_INFO = SandboxInfo(
    id="dk-0000000000",
    provider="docker",
    state="running",
    created_at=0.0,
    expires_at=0.0,
    owner_pid=1,
    owner_host="host",
    network="none",
    screen=(1280, 800),
)


def test_a_failed_drill_keeps_the_screen_of_the_failure_beside_the_report(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    # the set-up fails: the task's file lands where the desktop user cannot write
    task = parse_task(
        {
            "prompt": "x",
            "setup": {"files": [{"path": "/proc/cubicle-cannot-write", "content": "x"}]},
        },
        source=None,
        default_name="fails",
    )
    out = tmp_path / "run"
    script = {"turns": [{"message": "never reached"}]}
    result = run_drill(local_desktop, task=task, loop="toolset", out=out, script_template=script)
    assert not result.ok and result.error is not None
    screen = out / FAILURE_SCREEN
    with Image.open(screen) as image:
        assert image.size == local_desktop.screen
    assert not any((out / "shots").glob("*.png")), "the model received no screenshot"
    report = (out / "report.html").read_text(encoding="utf-8")
    assert f'<img src="{FAILURE_SCREEN}"' in report
