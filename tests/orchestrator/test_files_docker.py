"""Files in and out and the clipboard of a Docker sandbox, end to end: ``Sandbox.upload`` /
``download`` (a 200 MB random file, a Unicode folder tree, a link planted by the guest, a full
tmpfs home), ``cubicle cp`` / ``cubicle clip``, and the clipboard pasted into and copied from
the guest's editor with the driver's keys."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai.types.responses import computer_action as modern

from cubicle.drivers.computer import GuestDriver
from cubicle.orchestrator.cli import main
from cubicle.orchestrator.errors import TransferError
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.errors import GuestError
from tests.desktop.checks import wait_window
from tests.guest.test_files_and_clipboard import make_tree, tree_of
from tests.orchestrator.conftest import CliRun

pytestmark = [pytest.mark.docker]

HOME = "/home/cubicle"
BIG = 200 * 1024 * 1024
SPAWN = (
    "import subprocess, sys; subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL, start_new_session=True)"
)
PASTED = "Grüße 🙂🚀 漢字かな\nline two\n\tindented — end\n"
TYPED = "copied in the editor ✓ 中文"


@pytest.fixture(scope="module")
def sandbox(docker_image: str) -> Iterator[Sandbox]:
    created = Sandbox.create("docker")
    try:
        yield created
    finally:
        created.destroy()


def guest_entries(sandbox: Sandbox, folder: str) -> str:
    return sandbox.exec(["ls", "-A", folder]).stdout


def test_a_200_mb_file_goes_up_and_comes_back_identical(sandbox: Sandbox, tmp_path: Path) -> None:
    local = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with open(local, "wb") as stream:
        for _ in range(BIG // (4 * 1024 * 1024)):
            block = os.urandom(4 * 1024 * 1024)
            digest.update(block)
            stream.write(block)
    os.chmod(local, 0o751)
    os.utime(local, ns=(1_234_567_890_123_456_789, 1_234_567_890_123_456_789))
    sandbox.upload(local, HOME)
    guest = sandbox.exec(
        [
            "python3",
            "-c",
            f"import hashlib;print(hashlib.sha256(open('{HOME}/big.bin','rb').read()).hexdigest())",
        ]
    )
    assert guest.stdout.strip() == digest.hexdigest()
    back = tmp_path / "back"
    back.mkdir()
    sandbox.download(f"{HOME}/big.bin", back)
    copy = back / "big.bin"
    with open(copy, "rb") as stream:
        assert hashlib.file_digest(stream, "sha256").hexdigest() == digest.hexdigest()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o751
    assert copy.stat().st_mtime_ns == 1_234_567_890_123_456_789
    assert sandbox.exec(["rm", f"{HOME}/big.bin"]).exit_code == 0


def test_a_unicode_folder_tree_goes_up_and_comes_back(sandbox: Sandbox, tmp_path: Path) -> None:
    source = tmp_path / "arbre-树"
    source.mkdir()
    make_tree(source)
    sandbox.upload(source, "Desktop-copy")  # relative: the home's; not there: the copy's name
    probe = (
        "import json, os, pathlib, stat, sys; r = pathlib.Path(sys.argv[1]); print(json.dumps("
        "{p.relative_to(r).as_posix(): [stat.S_IMODE(p.lstat().st_mode), p.lstat().st_mtime_ns]"
        " for p in r.rglob('*')}))"
    )
    seen = json.loads(sandbox.exec(["python3", "-c", probe, f"{HOME}/Desktop-copy"]).stdout)
    assert seen == {name: [mode, mtime] for name, (_, mode, mtime, _) in tree_of(source).items()}
    back = tmp_path / "back"
    back.mkdir()
    sandbox.download("~/Desktop-copy", back)
    assert tree_of(back / "Desktop-copy") == tree_of(source)
    assert (back / "Desktop-copy").stat().st_mtime_ns == source.stat().st_mtime_ns
    assert not [p.name for p in back.iterdir() if p.name.startswith(".")]


def test_a_link_planted_by_the_guest_cannot_lead_a_download_outside(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = f"{HOME}/planted"
    assert sandbox.exec(["mkdir", "-p", f"{planted}/sub"]).exit_code == 0
    assert sandbox.exec(["ln", "-s", str(outside), f"{planted}/sub/escape"]).exit_code == 0
    assert sandbox.exec(["ln", "-s", "../../..", f"{planted}/up"]).exit_code == 0
    local = tmp_path / "local"
    local.mkdir()
    with pytest.raises(TransferError, match=r"symbolic link.*(sub/escape|up)"):
        sandbox.download(planted, local)
    assert list(local.iterdir()) == [] and list(outside.iterdir()) == []
    with pytest.raises(GuestError, match="does not exist"):
        sandbox.download(f"{HOME}/../../nowhere", local)
    assert list(local.iterdir()) == []


def test_a_full_tmpfs_home_is_a_clear_error_and_leaves_nothing(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    local = tmp_path / "too-big.bin"
    with open(local, "wb") as stream:  # sparse: no host disk used
        stream.truncate(600 * 1024 * 1024)
    with pytest.raises(GuestError, match="disk is full") as caught:
        sandbox.upload(local, HOME)
    assert caught.value.code == "no_space"
    assert "too-big" not in guest_entries(sandbox, HOME)
    # the space runs out in the middle of the stream (the agent's ops, no size announced):
    # a filler leaves the home 20 MiB, the upload's fourth chunk does not fit
    filler = f"{HOME}/filler"
    free_kib = int(sandbox.exec(["df", "--output=avail", HOME]).stdout.split()[-1])
    taken = sandbox.exec(["fallocate", "-l", f"{free_kib - 20 * 1024}K", filler])
    assert taken.exit_code == 0, taken.stderr
    with sandbox.connect() as client:
        handle = client.put_begin(f"{HOME}/filling.bin", "file", 0o644, 0).result["handle"]
        block, offset = bytes(8 * 1024 * 1024), 0
        with pytest.raises(GuestError, match="disk is full") as caught:
            for _ in range(10):
                client.put_chunk(handle, "", offset, block, timeout=60)
                offset += len(block)
        assert caught.value.code == "no_space" and offset > 0
        with pytest.raises(GuestError, match="no upload in progress"):
            client.put_commit(handle)
    assert sandbox.exec(["rm", filler]).exit_code == 0
    assert "filling" not in guest_entries(sandbox, HOME)
    free = sandbox.exec(["df", "--output=avail", HOME]).stdout.split()[-1]
    assert int(free) > 400 * 1024, f"the aborted upload's space was not given back: {free} KiB"


def test_cubicle_cp_copies_both_ways(
    sandbox: Sandbox, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    local = tmp_path / "note.txt"
    local.write_text("through the command line ✓\n")
    assert main(["cp", str(local), f"{sandbox.id}:{HOME}/"]) == 0
    down = tmp_path / "down"
    down.mkdir()
    assert main(["cp", f"{sandbox.id}:note.txt", str(down)]) == 0
    assert (down / "note.txt").read_bytes() == local.read_bytes()
    capfd.readouterr()
    assert main(["cp", str(local), str(down)]) == 1
    assert "cp copies between the host and one sandbox" in capfd.readouterr().err
    assert main(["cp", f"{sandbox.id}:missing.txt", str(down)]) == 1
    assert "does not exist" in capfd.readouterr().err


def test_the_clipboard_is_pasted_in_the_editor_and_copied_back(
    sandbox: Sandbox, cli: CliRun
) -> None:
    target = f"{HOME}/pasted.txt"
    sandbox.set_clipboard(PASTED)
    with sandbox.connect() as client, GuestDriver(client) as driver:
        client.write_file(target, b"")
        client.exec(["python3", "-c", SPAWN, "mousepad", target])
        wait_window(client, "Mousepad", 60)
        driver.keypress(modern.Keypress(type="keypress", keys=["ctrl", "v"]))
        driver.keypress(modern.Keypress(type="keypress", keys=["ctrl", "s"]))
        deadline = time.monotonic() + 30
        while client.read_file(target).blob != PASTED.encode() and time.monotonic() < deadline:
            client.settle(quiet_ms=200, timeout_ms=1000)
        assert client.read_file(target).blob == PASTED.encode("utf-8")
        # copied in the guest's app: the host reads it
        driver.keypress(modern.Keypress(type="keypress", keys=["ctrl", "a"]))
        driver.type(modern.Type(type="type", text=TYPED))
        driver.keypress(modern.Keypress(type="keypress", keys=["ctrl", "a"]))
        driver.keypress(modern.Keypress(type="keypress", keys=["ctrl", "c"]))
    assert sandbox.get_clipboard() == TYPED
    assert main(["clip", sandbox.id, "--primary", "--set", "prime ✓"]) == 0
    assert sandbox.get_clipboard("primary") == "prime ✓"
    assert sandbox.get_clipboard() == TYPED
    assert main(["clip", sandbox.id, "--set", PASTED]) == 0
    printed = cli("clip", sandbox.id)  # a process of its own: nothing else on its stdout
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == PASTED
