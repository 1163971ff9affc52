"""The engine book is trusted only as cubicle left it (B1b): an entry planted in a folder another
user can write, a file cubicle did not write 0600, or a symlink, is refused when read, and no
command talks to the engine socket it names."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from cubicle import CubicleError
from cubicle.orchestrator.providers.docker.engine import EngineBook
from tests.support.cli import run_cli
from tests.support.unix_server import unix_server

pytestmark = pytest.mark.attack

SANDBOX = "dk-0123456789"


def _entry(engine: str) -> str:
    return json.dumps(
        {
            "sandbox_id": SANDBOX,
            "engine": engine,
            "cert_path": None,
            "owner_pid": 1,
            "owner_start": 0,
            "created_at": 0.0,
        }
    )


def test_an_entry_planted_in_a_folder_others_can_write_is_never_followed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"  # XDG_STATE_HOME in a folder every user can write
    book = shared / "cubicle" / "docker-engines"
    book.mkdir(parents=True)
    shared.chmod(0o777)
    connections: list[int] = []
    lock = threading.Lock()

    def attacker(conn: socket.socket) -> None:
        with lock:
            connections.append(1)

    engine_socket = tmp_path / "evil.sock"
    (book / f"{SANDBOX}.json").write_text(_entry(f"unix://{engine_socket}"))
    with unix_server(engine_socket, attacker):
        for command in (("exec", SANDBOX, "true"), ("screenshot", SANDBOX, "-o", "x.png")):
            done = run_cli(*command, env={"XDG_STATE_HOME": str(shared)}, timeout=60)
            assert done.returncode != 0, done.stdout
            assert f"refusing the host folder {shared}" in done.stderr, done.stderr
            assert "Traceback" not in done.stderr
    assert connections == []


@pytest.mark.parametrize("how", ["writable by others", "symlink"])
def test_an_entry_cubicle_did_not_write_is_refused(tmp_path: Path, how: str) -> None:
    book = tmp_path / "book"
    book.mkdir(mode=0o700)
    entry = book / f"{SANDBOX}.json"
    if how == "symlink":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(_entry("unix:///tmp/evil.sock"))
        entry.symlink_to(elsewhere)
    else:
        entry.write_text(_entry("unix:///tmp/evil.sock"))
        os.chmod(entry, 0o666)
    with pytest.raises(CubicleError, match=f"refusing the host file {entry}"):
        EngineBook(book).lookup(SANDBOX)


def test_an_entry_cubicle_wrote_is_read(tmp_path: Path) -> None:
    book = tmp_path / "book"
    book.mkdir(mode=0o700)
    fd = os.open(book / f"{SANDBOX}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(_entry("unix:///run/docker.sock"))
    found = EngineBook(book).lookup(SANDBOX)
    assert found is not None and found.engine == "unix:///run/docker.sock"
