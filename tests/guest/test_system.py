"""exec, read_file and write_file inside the guest, through the live agent."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cubicle.orchestrator.hostprocs import alive
from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from cubicle_guest.waiting import Deadline, poll
from tests.guest.rawwire import RawConnection
from tests.support.agent import RunningAgent

pytestmark = pytest.mark.x11


def test_exec_runs_argv_without_a_shell(client: AgentClient, tmp_path: Path) -> None:
    result = client.exec(["echo", "$HOME", "a b", ";", "ls"], cwd=str(tmp_path)).result
    assert result["exit_code"] == 0 and result["timed_out"] is False
    assert result["stdout"] == "$HOME a b ; ls\n"
    assert result["stderr"] == ""


def test_exec_env_is_merged_and_stdin_is_fed(client: AgentClient, tmp_path: Path) -> None:
    script = (
        "import os,sys; print(os.environ['CUBICLE_X'], os.environ['PATH'] != '', "
        "os.getcwd(), sys.stdin.read()); sys.exit(3)"
    )
    result = client.exec(
        [sys.executable, "-c", script], cwd=str(tmp_path), env={"CUBICLE_X": "ü"}, stdin="fed ✓"
    ).result
    assert result["stdout"] == f"ü True {tmp_path} fed ✓\n"
    assert result["exit_code"] == 3


def test_exec_timeout_kills_the_process_group(client: AgentClient, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess,sys,time; p=subprocess.Popen([sys.executable,'-c',"
        "'import time; time.sleep(60)']); open(sys.argv[1],'w').write(str(p.pid)); "
        "time.sleep(60)"
    )
    result = client.exec([sys.executable, "-c", script, str(pidfile)], timeout_ms=1500).result
    assert result["timed_out"] is True and result["exit_code"] is None
    child = int(pidfile.read_text())
    # the grandchild died with the group: gone, or a zombie until init (not us) reaps it
    died = any(not alive(child) for _ in poll(Deadline(5.0), 0.01))
    assert died, f"the exec's grandchild {child} outlived its group"


def test_exec_output_is_cut_at_the_limit_and_says_so(client: AgentClient) -> None:
    size = protocol.MAX_EXEC_OUTPUT_BYTES + 1000
    result = client.exec(
        [
            sys.executable,
            "-c",
            f"import sys; sys.stdout.write('x'*{size}); sys.stderr.write('e')",
        ]
    ).result
    assert result["stdout_truncated"] is True and result["stderr_truncated"] is False
    assert len(result["stdout"]) == protocol.MAX_EXEC_OUTPUT_BYTES
    assert result["stderr"] == "e"


@pytest.mark.parametrize(
    ("args", "code", "named"),
    [
        ({"argv": ["/nonexistent/program"]}, "not_found", "/nonexistent/program"),
        ({"argv": ["true"], "cwd": "/nonexistent-dir"}, "not_found", "/nonexistent-dir"),
        ({"argv": ["true"], "timeout_ms": 0}, "bad_args", "timeout_ms"),
        ({"argv": []}, "bad_args", "'argv'"),
        ({"argv": "echo hi"}, "bad_args", "'argv'"),
    ],
)
def test_exec_bad_input(
    agent: RunningAgent, args: dict[str, object], code: str, named: str
) -> None:
    with RawConnection(agent.socket_path) as conn:
        conn.request(1, "exec", args)
        error = conn.reply_to(1).message["error"]
    assert error["code"] == code and named in error["message"]


def test_write_then_read_file_round_trip(client: AgentClient, tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "file.bin"
    data = bytes(range(256)) * 1000
    written = client.write_file(str(target), data, mode=0o600, mkdirs=True).result
    assert written == {"size": len(data)}
    assert target.read_bytes() == data
    assert target.stat().st_mode & 0o777 == 0o600
    reply = client.read_file(str(target))
    assert reply.result == {"size": len(data)} and reply.blob == data
    assert [p.name for p in target.parent.iterdir()] == ["file.bin"]  # no temp files left


def test_write_file_replaces_atomically(client: AgentClient, tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    inode = target.stat().st_ino
    client.write_file(str(target), b"new")
    assert target.read_text() == "new"
    assert target.stat().st_ino != inode  # a new file renamed over the old one


def test_file_errors(client: AgentClient, tmp_path: Path) -> None:
    with pytest.raises(GuestError) as missing:
        client.read_file(str(tmp_path / "nope"))
    assert missing.value.code == "not_found" and "nope" in missing.value.reason
    with pytest.raises(GuestError) as no_dir:
        client.write_file(str(tmp_path / "a" / "b"), b"x")
    assert no_dir.value.code == "not_found" and "mkdirs" in no_dir.value.reason
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    with pytest.raises(GuestError) as too_big:
        client.read_file(str(big), max_bytes=99)
    assert too_big.value.code == "too_large" and "100 bytes" in too_big.value.reason
    with pytest.raises(GuestError) as is_dir:
        client.read_file(str(tmp_path))
    assert is_dir.value.code == "io_error"


def test_write_file_over_the_limit_is_refused(client: AgentClient, tmp_path: Path) -> None:
    target = tmp_path / "huge"
    with pytest.raises(GuestError) as caught:
        client.write_file(str(target), b"\0" * (protocol.MAX_FILE_BYTES + 1))
    assert caught.value.code == "too_large"
    assert not target.exists()
