"""Files in and out and the clipboard, against a real agent on a private Xvfb (no sandbox):
the agent's ``files`` and ``clipboard`` operations and the host's side of them
(:mod:`cubicle.orchestrator.file_transfer`). The sandbox round trips are
tests/orchestrator/test_files_docker.py."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from Xlib.protocol import event

from cubicle.orchestrator import file_transfer
from cubicle.orchestrator.errors import TransferError
from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.clipboard import Clipboard
from cubicle_guest.errors import GuestError
from tests.support.xvfb import Xvfb

TEXT = "héllo 🙂 世界\nsecond line\ttab\n"


def tree_of(root: Path) -> dict[str, tuple[str, int, int, bytes]]:
    """Every entry below ``root``: kind, permission bits, mtime (ns) and a file's bytes."""
    found: dict[str, tuple[str, int, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
        found[path.relative_to(root).as_posix()] = (
            kind,
            stat.S_IMODE(info.st_mode),
            info.st_mtime_ns,
            data,
        )
    return found


def make_tree(root: Path) -> None:
    (root / "données" / "子目录").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "a.txt").write_bytes(b"alpha\n")
    (root / "données" / "🙂.bin").write_bytes(os.urandom(3 * protocol.MAX_CHUNK_BYTES // 2))
    (root / "données" / "子目录" / "empty").write_bytes(b"")
    os.chmod(root / "a.txt", 0o640)
    os.chmod(root / "données" / "🙂.bin", 0o755)
    os.chmod(root / "données" / "子目录", 0o750)
    for index, path in enumerate(sorted(root.rglob("*"), key=lambda p: -len(p.parts))):
        os.utime(path, ns=(1_600_000_000_123_456_789 + index, 1_600_000_000_123_456_789 + index))
    os.utime(root, ns=(1_500_000_000_000_000_001, 1_500_000_000_000_000_001))


def test_a_folder_tree_goes_up_and_comes_back_identical(
    client: AgentClient, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    make_tree(source)
    guest = tmp_path / "guest"
    guest.mkdir()
    copied = file_transfer.upload(client, source, str(guest))  # an existing folder: into it
    assert copied.path == str(guest / "source")
    assert tree_of(guest / "source") == tree_of(source)
    assert (guest / "source").stat().st_mtime_ns == source.stat().st_mtime_ns
    back = tmp_path / "back"
    back.mkdir()
    file_transfer.download(client, str(guest / "source"), back)
    assert tree_of(back / "source") == tree_of(source)
    assert not [p for p in tmp_path.rglob(".*.part")], "a staging entry was left"


def test_a_file_replaces_a_file_and_a_folder_is_never_merged(
    client: AgentClient, tmp_path: Path
) -> None:
    local = tmp_path / "f.txt"
    local.write_bytes(b"new")
    existing = tmp_path / "guest.txt"
    existing.write_bytes(b"old")
    file_transfer.upload(client, local, str(existing))
    assert existing.read_bytes() == b"new"
    folder = tmp_path / "folder"
    (folder / "inner").mkdir(parents=True)
    target = tmp_path / "target"
    (target / "folder").mkdir(parents=True)
    with pytest.raises(GuestError, match="already exists") as caught:
        file_transfer.upload(client, folder, str(target))
    assert caught.value.code == "io_error"
    with pytest.raises(TransferError, match="already exists"):
        file_transfer.download(client, str(folder), target)


def test_a_guest_planted_link_is_refused_before_anything_is_written(
    client: AgentClient, tmp_path: Path
) -> None:
    guest = tmp_path / "guest"
    guest.mkdir()
    (guest / "ok.txt").write_text("fine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (guest / "evil").symlink_to(outside)
    local = tmp_path / "local"
    local.mkdir()
    with pytest.raises(TransferError, match=r"symbolic link.*evil"):
        file_transfer.download(client, str(guest), local)
    assert list(local.iterdir()) == [] and list(outside.iterdir()) == []


def test_a_lying_listing_cannot_name_a_host_path_outside(tmp_path: Path) -> None:
    """A guest agent that lies (``..``, absolute names, children before their folder) is
    refused by the host's checks alone."""
    for bad in ("../escape", "/etc/passwd", "a/../../x", "a//b", "x/y"):
        listing = {
            "path": "/home/cubicle/d",
            "kind": "dir",
            "mode": 0o755,
            "mtime_ns": 0,
            "size": 0,
            "entries": [{"name": bad, "kind": "file", "mode": 0o644, "mtime_ns": 0, "size": 1}],
        }
        with pytest.raises(TransferError, match="refused"):
            file_transfer._guest_tree(listing)


def test_bad_names_and_handles_are_clear_errors(client: AgentClient, tmp_path: Path) -> None:
    begun = client.put_begin(str(tmp_path / "d"), "dir", 0o755, 0).result
    with pytest.raises(GuestError, match="bad entry name") as caught:
        client.put_mkdir(begun["handle"], "../x", 0o755, 0)
    assert caught.value.code == "bad_args"
    client.put_abort(begun["handle"])
    assert not list(tmp_path.iterdir())
    with pytest.raises(GuestError, match="no upload in progress") as caught:
        client.put_commit(begun["handle"])
    assert caught.value.code == "not_found"
    with pytest.raises(GuestError, match="does not exist") as caught:
        client.put_begin(str(tmp_path / "missing" / "f"), "file", 0o644, 0)
    assert caught.value.code == "not_found"


def test_an_upload_bigger_than_the_free_space_is_refused_at_once(
    client: AgentClient, tmp_path: Path
) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with pytest.raises(GuestError, match="disk is full") as caught:
        client.put_begin(str(tmp_path / "big"), "file", 0o644, 0, size=free + 1)
    assert caught.value.code == "no_space"
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- the clipboard


@pytest.fixture
def other_app(xserver: Xvfb) -> Iterator[Clipboard]:
    """Another X client of the same display: a program of the desktop."""
    other = Clipboard(xserver.display)
    yield other
    other.close()


@pytest.mark.parametrize("selection", ["clipboard", "primary"])
def test_the_agents_text_is_pasted_by_another_client(
    client: AgentClient, other_app: Clipboard, selection: str
) -> None:
    assert client.clipboard_set(TEXT, selection=selection).result == {"size": len(TEXT.encode())}
    assert other_app.get(selection) == (TEXT, "other")
    assert client.clipboard_get(selection=selection).result == {"text": TEXT, "owner": "agent"}


def test_text_another_client_copied_is_read_by_the_agent(
    client: AgentClient, other_app: Clipboard
) -> None:
    other_app.set("copied in an app 🙂")
    assert client.clipboard_get().result == {"text": "copied in an app 🙂", "owner": "other"}


def test_clipboard_limits_are_clear_errors(client: AgentClient) -> None:
    with pytest.raises(GuestError, match="over the limit") as caught:
        client.clipboard_set("x" * (protocol.MAX_CLIPBOARD_BYTES + 1))
    assert caught.value.code == "too_large"
    with pytest.raises(GuestError, match='"clipboard" or "primary"'):
        client.clipboard_get(selection="secondary")


class IncrOwner(Clipboard):
    """A program of the desktop whose text is too long for one X property: it answers every
    text request with ``INCR`` (the size, the pieces to follow)."""

    def _answer(self, request: Any) -> None:
        if request.target not in self._text_targets | self._latin_targets:
            super()._answer(request)
            return
        request.requestor.change_property(request.property, self._incr, 32, [3_000_000])
        request.requestor.send_event(
            event.SelectionNotify(
                time=request.time,
                requestor=request.requestor,
                selection=request.selection,
                target=request.target,
                property=request.property,
            )
        )
        self._display.flush()


def test_a_guest_text_over_the_limit_is_refused_naming_it(
    client: AgentClient, xserver: Xvfb, other_app: Clipboard
) -> None:
    """A program's text longer than the limit, in one property or in ``INCR`` pieces: a clear
    ``too_large`` naming the limit, and the clipboard keeps working."""
    big = ("é" * (protocol.MAX_CLIPBOARD_BYTES // 2 + 1)).encode()
    selection = other_app._selections["clipboard"]  # owned past set()'s own check
    other_app._call(lambda: other_app._take(selection, big, "clipboard"))
    limit = f"over the limit of {protocol.MAX_CLIPBOARD_BYTES} bytes the agent reads"
    with pytest.raises(GuestError) as caught:
        client.clipboard_get()
    assert caught.value.code == "too_large"
    assert caught.value.reason == f"the clipboard holds {len(big)} bytes of text, {limit}"

    incr = IncrOwner(xserver.display)
    try:
        incr.set("announced in pieces")
        with pytest.raises(GuestError) as caught:
            client.clipboard_get()
        assert caught.value.code == "too_large"
        assert caught.value.reason == (
            f"the clipboard holds a text sent in pieces (INCR), 3000000 bytes, {limit}"
        )
    finally:
        incr.close()
    client.clipboard_set(TEXT)
    assert client.clipboard_get().result == {"text": TEXT, "owner": "agent"}


def test_a_pipeline_answers_in_order_and_an_error_leaves_the_client_usable(
    client: AgentClient, tmp_path: Path
) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    path = str(tmp_path / "f")
    calls = [("get_chunk", {"path": path, "offset": at, "length": 3}, b"") for at in (0, 3, 6, 9)]
    assert [reply.blob for reply in client.pipeline(calls, depth=3)] == [
        b"012",
        b"345",
        b"678",
        b"9",
    ]
    failing = [
        ("get_chunk", {"path": path, "offset": 0, "length": 1}, b""),
        ("get_chunk", {"path": str(tmp_path / "missing"), "offset": 0, "length": 1}, b""),
        ("get_chunk", {"path": path, "offset": 1, "length": 1}, b""),
        ("get_chunk", {"path": path, "offset": 2, "length": 1}, b""),
    ]
    replies = client.pipeline(failing, depth=3)
    assert next(replies).blob == b"0"
    with pytest.raises(GuestError, match="does not exist"):
        next(replies)
    assert client.get_chunk(path, 5, 2).blob == b"56"  # the replies still in flight are skipped
