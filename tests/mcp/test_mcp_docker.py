"""``cubicle mcp`` through the real ``mcp`` client on Docker, on stdio and on HTTP: the editor
round trip a model would make (create, screenshot, click the launcher, type, save, download the
file and compare its bytes, destroy), with the files and the clipboard too (upload, download,
refusals of paths out of the files folder, a Unicode clipboard); closing the stdio client removes
the server's sandboxes within the client's grace; a server killed with SIGKILL leaves nothing
after ``cubicle gc``."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import time
from pathlib import Path

import anyio
import docker
import pytest
from mcp import Client
from mcp.client.stdio import FORCE_KILL_TIMEOUT, PROCESS_TERMINATION_TIMEOUT

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.waiting import Deadline, poll
from tests.desktop.checks import wait_window
from tests.mcp.support import (
    call,
    child_server,
    http_client,
    image_of,
    running,
    start_http,
    stdio_params,
    text,
)
from tests.orchestrator.support import leftovers
from tests.support.cli import run_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SCREEN = (1280, 800)
APP_TIMEOUT_S = 60.0
GRACE_S = PROCESS_TERMINATION_TIMEOUT + FORCE_KILL_TIMEOUT
"""The stdio client closes the server's stdin, SIGTERMs it 2 s later and SIGKILLs it 2 s after."""


def left_of(sandbox_id: str) -> list[str]:
    """The engine objects of ``sandbox_id`` still there."""
    with contextlib.closing(docker.from_env()) as engine:
        return leftovers(engine, {L.SANDBOX: sandbox_id})


def wait_for(sandbox_id: str, title: str) -> None:
    """Until the editor's window titled ``title``... has the focus (an observer's connection of
    the test's own, not the server's)."""
    with Sandbox.attach(sandbox_id).connect() as observer:
        wait_window(observer, "Mousepad", APP_TIMEOUT_S, title=title)


async def create(client: Client) -> str:
    created = await call(client, "create_sandbox", {})
    sandbox_id = text(created).split()[-1]
    assert sandbox_id.startswith("dk-"), text(created)
    return sandbox_id


UNICODE_BYTES = "grüße 你好 🎉\r\nzweite Zeile\tend\n".encode() + bytes(range(256))
CLIPBOARD = "emoji 🎉👩‍💻, CJK 漢字かな한글\nsecond line\n\nend"


async def refused(client: Client, tool: str, arguments: dict[str, object]) -> str:
    """The error text of a call that must fail."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, text(result))
    return text(result)


async def files_and_clipboard(client: Client, sandbox_id: str, files: Path) -> None:
    """On the round trip's sandbox (its ~/task/todo.txt saved by the editor and downloaded into
    the files folder): a file with Unicode and binary content up and read back with exec; the
    saved file down to a chosen name; ways out of the folder refused naming the field, and a
    guest-planted link; a Unicode text through the clipboard."""
    sid: dict[str, object] = {"sandbox_id": sandbox_id}
    (files / "in").mkdir(parents=True)
    (files / "in" / "ünï 文.bin").write_bytes(UNICODE_BYTES)
    up = await call(client, "upload", {**sid, "local": "in/ünï 文.bin", "guest_path": "task"})
    assert text(up).endswith(f"/task/ünï 文.bin (1 file, {len(UNICODE_BYTES)} bytes)."), text(up)
    read = await call(
        client, "exec", {**sid, "argv": ["sh", "-c", 'base64 -w0 ~/task/"ünï 文.bin"']}
    )
    assert base64.b64decode(text(read).split("--- stdout ---\n")[1]) == UNICODE_BYTES

    await call(client, "download", {**sid, "guest_path": "task/todo.txt", "local": "in/t2.txt"})
    assert (files / "in" / "t2.txt").read_bytes() == b"milk\neggs\nbread\n"

    assert "local: Value error, a '..' part is refused" in await refused(
        client, "upload", {**sid, "local": "../x", "guest_path": "task"}
    )
    passwd = Path("/etc/passwd").read_bytes()
    assert "local: Value error, an absolute path is refused" in await refused(
        client, "download", {**sid, "guest_path": "task/todo.txt", "local": "/etc/passwd"}
    )
    assert Path("/etc/passwd").read_bytes() == passwd
    outside = files.parent / "outside"
    outside.mkdir()
    (files / "out").symlink_to(outside)
    assert "local: 'out' in 'out/x' is a symbolic link" in await refused(
        client, "download", {**sid, "guest_path": "task/todo.txt", "local": "out/x"}
    )
    assert list(outside.iterdir()) == []
    await call(client, "exec", {**sid, "argv": ["sh", "-c", "ln -s /etc ~/task/etc-link"]})
    assert "symbolic link(s) or special file(s)" in await refused(
        client, "download", {**sid, "guest_path": "task", "local": "got"}
    )
    assert sorted(p.name for p in files.iterdir()) == ["in", "out", "todo.txt"]  # nothing left

    said = await call(client, "clipboard_set", {**sid, "text": CLIPBOARD})
    assert "clipboard selection holds the text" in text(said), text(said)
    got = await call(client, "clipboard_get", sid)
    assert text(got) == CLIPBOARD


async def editor_round_trip(client: Client, files: Path) -> None:
    """What tasks/editor-save asks a model, through the tools: open a prepared file in the
    editor from its launcher, add a line, save; then download the file into the server's files
    folder ``files`` and compare its bytes, and :func:`files_and_clipboard` on the same
    sandbox."""
    sandbox_id = await create(client)
    assert sandbox_id in text(await call(client, "list_sandboxes", {}))
    shot = image_of(await call(client, "screenshot", {"sandbox_id": sandbox_id}))
    assert shot.size == SCREEN
    panel = shot.getpixel((PANEL.launcher_center("editor", SCREEN)[0] + 90, SCREEN[1] - 20))
    assert isinstance(panel, tuple)
    assert max(abs(a - b) for a, b in zip(panel, PANEL.background, strict=True)) <= 24, panel

    prepared = await call(
        client,
        "exec",
        {
            "sandbox_id": sandbox_id,
            "argv": ["sh", "-c", "mkdir -p ~/task && printf 'milk\\neggs\\n' > ~/task/todo.txt"
                     " && echo ~/task/todo.txt"],
        },
    )  # fmt: skip
    path = text(prepared).split("\n")[2]
    assert path.endswith("/task/todo.txt"), text(prepared)

    x, y = PANEL.launcher_center("editor", SCREEN)
    clicked = await call(client, "click", {"sandbox_id": sandbox_id, "x": x, "y": y})
    assert text(clicked).startswith(f"click done at ({x}, {y}).")
    wait_for(sandbox_id, "")
    keys = [["CTRL", "O"], ["CTRL", "L"]]
    for chord in keys:
        await call(client, "keypress", {"sandbox_id": sandbox_id, "keys": chord})
        if chord == ["CTRL", "O"]:
            wait_for(sandbox_id, "Open")
    await call(client, "type", {"sandbox_id": sandbox_id, "text": path})
    await call(client, "keypress", {"sandbox_id": sandbox_id, "keys": ["ENTER"]})
    wait_for(sandbox_id, "~/task/todo.txt - Mousepad")
    await call(client, "keypress", {"sandbox_id": sandbox_id, "keys": ["CTRL", "END"]})
    await call(client, "type", {"sandbox_id": sandbox_id, "text": "bread\n"})
    saved = await call(client, "keypress", {"sandbox_id": sandbox_id, "keys": ["CTRL", "S"]})
    assert "focused window" in text(saved), text(saved)  # the receipt, as the drivers give it
    wait_for(sandbox_id, "~/task/todo.txt - Mousepad")  # saved: no "*" before the name

    down = await call(client, "download", {"sandbox_id": sandbox_id, "guest_path": path})
    assert "to todo.txt in the files folder (1 file, 16 bytes" in text(down), text(down)
    assert (files / "todo.txt").read_bytes() == b"milk\neggs\nbread\n"
    await files_and_clipboard(client, sandbox_id, files)

    assert text(await call(client, "destroy_sandbox", {"sandbox_id": sandbox_id})) == (
        f"Removed {sandbox_id}."
    )
    assert left_of(sandbox_id) == []
    assert sandbox_id not in text(await call(client, "list_sandboxes", {}))


def test_stdio_editor_round_trip_files_clipboard_and_the_close_removes_the_sandboxes(
    docker_image: str, tmp_path: Path
) -> None:
    files = tmp_path / "files"

    async def main() -> tuple[str, float]:
        async with Client(stdio_params("--files", str(files))) as client:
            await editor_round_trip(client, files)
            kept = await create(client)
            assert left_of(kept) != []
            closing = time.monotonic()
        return kept, time.monotonic() - closing

    kept, close_s = anyio.run(main)
    assert left_of(kept) == [], "closing the stdio client left the server's sandbox"
    assert close_s < GRACE_S, f"the server took {close_s:.1f} s to stop (SIGKILL at {GRACE_S} s)"


def test_sigterm_on_stdio_removes_the_sandbox_and_the_server_exits(docker_image: str) -> None:
    """SIGTERM from anyone but the client (stdin still open): the sandbox is removed and the
    process exits, not held up by its stdin reader."""

    async def main() -> tuple[str, bool]:
        async with Client(stdio_params()) as client:
            kept = await create(client)
            pid = child_server()
            os.kill(pid, signal.SIGTERM)
            deadline = Deadline(GRACE_S)
            for _ in poll(deadline, 0.05):
                if not running(pid):
                    break
            return kept, running(pid)

    kept, still_running = anyio.run(main)
    assert not still_running, f"the server was still running {GRACE_S} s after SIGTERM"
    assert left_of(kept) == []


def test_http_editor_round_trip_then_sigkill_and_gc_leave_nothing(
    docker_image: str, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    server = start_http(tmp_path / "mcp.token", "--files", str(files))
    kept = ""
    try:

        async def main() -> str:
            async with http_client(server.url, server.token) as client:
                await editor_round_trip(client, files)
                return await create(client)

        kept = anyio.run(main)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(timeout=30)
        assert left_of(kept) != [], "the sandbox went with the server: nothing for gc to prove"
        collected = run_cli("gc")
        assert collected.returncode == 0, collected.stderr
        assert kept in collected.stdout, collected.stdout
        assert left_of(kept) == []
    finally:
        server.stop()
        if kept and left_of(kept):
            run_cli("down", kept)
