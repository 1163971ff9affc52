"""Docker sandboxes end to end against the real engine: lifecycle, desktop, hardening, cleanup."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest
from PIL import Image

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.errors import ProviderError, SandboxNotFound, SandboxStartError
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.docker.provider import GUEST_UID, DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.errors import GuestError
from tests.orchestrator.conftest import CliRun, Tracker
from tests.orchestrator.support import leftovers

pytestmark = [pytest.mark.docker]

SPAWN = (
    "import subprocess, sys; subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL, start_new_session=True)"
)


HARDENING_PROBE = """
import errno, json, os
status = {}
for line in open("/proc/self/status").read().splitlines():
    key, _, value = line.partition(":")
    status[key] = value.strip()
try:
    open("/etc/cubicle-probe", "w")
    rofs = False
except OSError as exc:
    rofs = exc.errno == errno.EROFS
print(json.dumps({"uid": os.getuid(), "capeff": status["CapEff"], "capbnd": status["CapBnd"],
                  "nnp": status["NoNewPrivs"], "rofs": rofs}))
"""


def colours(png: bytes) -> int:
    """Number of distinct colours in an image."""
    with Image.open(io.BytesIO(png)) as image:
        found = image.convert("RGB").getcolors(maxcolors=1 << 24)
    assert found is not None
    return len(found)


def test_up_screenshot_exec_down_through_the_python_api(
    sandboxes: Tracker, engine: docker.DockerClient
) -> None:
    sandbox = sandboxes.create(screen=(1024, 768))
    assert sandbox.id.startswith("dk-")

    result, png = sandbox.screenshot()
    assert result["native"] == {"width": 1024, "height": 768}
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == (1024, 768)
    assert colours(png) >= 2, "the desktop background is a pattern, not one flat colour"

    done = sandbox.exec(["id", "-u"])
    assert (done.exit_code, done.stdout.strip()) == (0, str(GUEST_UID))
    failed = sandbox.exec(["python3", "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])
    assert (failed.exit_code, failed.stderr) == (3, "boom")

    sandbox.destroy()
    sandbox.destroy()  # idempotent
    assert leftovers(engine, {L.SANDBOX: sandbox.id}) == []


def test_applications_open_maximized_above_the_panel(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    sandbox.exec(["python3", "-c", SPAWN, "xterm", "-title", "cubicle-test-term"])
    with sandbox.connect() as client:
        settle = client.settle(quiet_ms=300, timeout_ms=20000).result
        windows = client.windows().result["windows"]
        terms = [w for w in windows if w["title"] == "cubicle-test-term"]
        for _ in range(100):
            if terms:
                break
            client.wait(ms=100)
            terms = [
                w for w in client.windows().result["windows"] if w["title"] == "cubicle-test-term"
            ]
    assert settle["waited_ms"] >= 0
    assert terms, f"xterm never mapped a window; windows: {windows}"
    term = terms[0]
    # maximized in the work area, under its title bar, down to the panel
    # (cubicle/orchestrator/desktop.py)
    assert (term["x"], term["width"]) == (0, 1280)
    assert 0 < term["y"] <= 40 and term["y"] + term["height"] == PANEL.top((1280, 800)), term
    _, png = sandbox.screenshot()
    assert colours(png) >= 2


def test_cli_up_screenshot_exec_logs_down(
    provider: DockerProvider, engine: docker.DockerClient, cli: CliRun, tmp_path: Path
) -> None:
    run = cli
    up = run("up", "--size", "800x600", "--json")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    sandbox_id = info["id"]
    try:
        assert info["screen"] == "800x600" and info["ownership"] == "detached"
        listed = run("ls", "--json")
        assert sandbox_id in [row["id"] for row in json.loads(listed.stdout)]

        shot = tmp_path / "shot.png"
        assert run("screenshot", sandbox_id, "-o", str(shot)).returncode == 0
        with Image.open(shot) as image:
            assert image.size == (800, 600)
        assert colours(shot.read_bytes()) >= 2

        done = run("exec", sandbox_id, "--", "python3", "-c", "print(6 * 7)")
        assert (done.returncode, done.stdout.strip()) == (0, "42")
        failed = run("exec", sandbox_id, "--", "false")
        assert failed.returncode == 1

        logs = run("logs", sandbox_id)
        assert "[supervisor] Xvfb ready on :0 at 800x600" in logs.stdout
    finally:
        down = run("down", sandbox_id)
    assert down.returncode == 0, down.stderr
    assert leftovers(engine, {L.SANDBOX: sandbox_id}) == []
    gone = run("exec", sandbox_id, "--", "true")
    assert gone.returncode == 5 and "hint: list sandboxes with: cubicle ls" in gone.stderr


def test_hardening_seen_from_inside(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    probe = sandbox.exec(["python3", "-c", HARDENING_PROBE])
    assert probe.exit_code == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["uid"] != 0
    assert int(seen["capeff"], 16) == 0 and int(seen["capbnd"], 16) == 0
    assert seen["nnp"] == "1"
    assert seen["rofs"] is True

    # the agent's socket folder is the guest's own tmpfs, private to the desktop user; the host
    # has no path to it (the agent is reached over docker exec)
    folder = sandbox.exec(["stat", "-c", "%a %u", "/run/cubicle"])
    assert folder.stdout.split() == ["700", str(GUEST_UID)]
    with pytest.raises(ProviderError, match="no agent socket on the host"):
        sandbox.agent_socket()


@contextmanager
def derived_image(engine: docker.DockerClient, base: str, code: str) -> Iterator[str]:
    """An image from ``base`` whose entrypoint runs python ``code`` instead of the supervisor."""
    tag = "cubicle-test-derived:latest"
    dockerfile = f"FROM {base}\nENTRYPOINT {json.dumps(['python3', '-c', code])}\n"
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    try:
        yield tag
    finally:
        engine.images.remove(tag, force=True)


def test_failed_start_reports_the_log_tail_and_leaves_nothing(
    provider: DockerProvider, docker_image: str, engine: docker.DockerClient
) -> None:
    code = "print('agent disabled for this test', flush=True); import time; time.sleep(600)"
    with derived_image(engine, docker_image, code) as image:
        before = set(leftovers(engine, {L.OWNER_PID: str(os.getpid())}))
        with pytest.raises(SandboxStartError) as caught:
            Sandbox.create(spec=SandboxSpec(image=image), ready_timeout_s=4)
    error = caught.value
    assert "did not answer hello within 4.0 s" in str(error)
    assert "agent disabled for this test" in error.log_tail
    assert leftovers(engine, {L.SANDBOX: error.sandbox_id}) == []
    assert set(leftovers(engine, {L.OWNER_PID: str(os.getpid())})) == before


def test_a_guest_that_exits_fails_fast(
    provider: DockerProvider, docker_image: str, engine: docker.DockerClient
) -> None:
    code = "print('desktop crashed for this test', flush=True); raise SystemExit(1)"
    with (
        derived_image(engine, docker_image, code) as image,
        pytest.raises(SandboxStartError) as caught,
    ):
        Sandbox.create(spec=SandboxSpec(image=image), ready_timeout_s=600)
    assert "stopped while starting (state: exited)" in str(caught.value)
    assert "desktop crashed for this test" in caught.value.log_tail
    assert leftovers(engine, {L.SANDBOX: caught.value.sandbox_id}) == []


def test_agent_restarts_after_it_dies(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    with sandbox.connect() as client:
        pid = client.hello_result["pid"] if client.hello_result else None
    assert isinstance(pid, int)
    sandbox.provider.docker_exec(sandbox.id, ["kill", "-KILL", str(pid)])  # type: ignore[attr-defined]
    client2 = None
    for _ in range(100):
        try:
            client2 = sandbox.connect(timeout=5)
            break
        except Exception:
            continue
    assert client2 is not None, sandbox.logs()
    with client2:
        assert client2.hello_result is not None and client2.hello_result["pid"] != pid
    assert "agent exited with status -9" in sandbox.logs()


def test_attach_unknown_and_malformed_ids(provider: DockerProvider) -> None:
    with pytest.raises(SandboxNotFound, match="no docker sandbox 'dk-0000000000'"):
        Sandbox.attach("dk-0000000000")
    with pytest.raises(SandboxNotFound, match="not a cubicle sandbox id"):
        Sandbox.attach("nope")
    provider.destroy("dk-0000000000")  # unknown id: no error


def test_agent_errors_pass_through(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    with sandbox.connect() as client, pytest.raises(GuestError) as caught:
        client.click(5000, 10)
    assert caught.value.code == "out_of_bounds"


def test_image_has_the_desktop_apps_and_fonts(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    found = sandbox.exec(
        [
            "python3",
            "-c",
            "import shutil, sys; print([shutil.which(a) for a in sys.argv[1:]])",
            "xterm",
            "mousepad",
            "chromium",
            "openbox",
            "tint2",
            "Xvfb",
        ]
    )
    assert "None" not in found.stdout, found.stdout
    cjk = sandbox.exec(["fc-list", ":lang=ja", "family"])
    assert "Noto Sans CJK JP" in cjk.stdout
    latin = sandbox.exec(["fc-list", ":lang=fr", "family"])
    assert "DejaVu Sans" in latin.stdout
    emoji = sandbox.exec(["fc-list", ":color=true", "family"])
    assert "Noto Color Emoji" in emoji.stdout
