"""The stdio bridge (``python -m cubicle_guest.bridge``) as the engine runs it: a real process,
real pipes.

A local unix server stands in for the agent; the test speaks to the bridge's stdin/stdout.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cubicle_guest.bridge import EXIT_UNREACHABLE
from tests.support.unix_server import unix_server


@contextmanager
def echo_server(path: Path) -> Iterator[list[str]]:
    """Echo every byte back; record how each connection ended (``eof`` when the peer half-closed).

    The server speaks only after it is spoken to, like the agent.
    """
    events: list[str] = []

    def echo(conn: socket.socket) -> None:
        while data := conn.recv(65536):
            conn.sendall(data)
        events.append("eof")

    with unix_server(path, echo):
        yield events


def bridge(path: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cubicle_guest.bridge", str(path), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_every_byte_value_crosses_unchanged_both_ways(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    payload = bytes(range(256)) * 20_000 + b"\r\n\x00\x03\x04\x1a"  # ~5 MB, controls included
    with echo_server(path) as events:
        process = bridge(path)
        out, err = process.communicate(payload, timeout=60)
    assert (process.returncode, err) == (0, b"")
    assert out == payload
    assert events == ["eof"], "closing stdin must half-close the agent connection"


def test_the_bridge_waits_for_an_agent_that_starts_late(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    process = bridge(path, "--wait", "30")
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"hello")
    process.stdin.flush()
    with echo_server(path):
        assert process.stdout.read(5) == b"hello"
        process.stdin.close()
        assert process.wait(timeout=30) == 0
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()


def test_no_agent_is_said_on_stderr_and_nothing_on_stdout(tmp_path: Path) -> None:
    path = tmp_path / "absent.sock"
    process = bridge(path, "--wait", "0.2")
    out, err = process.communicate(b"request", timeout=30)
    assert process.returncode == EXIT_UNREACHABLE
    assert out == b""
    assert str(path).encode() in err and b"within 0.2 s" in err


def test_a_bridge_not_spoken_to_within_its_bound_ends_unused(tmp_path: Path) -> None:
    """``--first-within``: stdin stays open and silent (an engine that lost the close of a
    stream never used): the bridge ends by itself, 0, saying so, and never connects."""
    path = tmp_path / "agent.sock"
    connections: list[str] = []
    with unix_server(path, lambda _conn: connections.append("connected")):
        process = bridge(path, "--first-within", "0.3")
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        try:
            status = process.wait(timeout=30)  # stdin still open: only the bound ends it
        finally:
            process.kill()
            process.stdin.close()
        out, err = process.stdout.read(), process.stderr.read()
        process.stdout.close()
        process.stderr.close()
    assert (status, out) == (0, b"")
    assert b"not spoken to within 0.3 s" in err
    assert connections == [], "a bridge never spoken to must not touch the agent"


def test_a_bridge_spoken_to_within_its_bound_forwards_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    with echo_server(path) as events:
        process = bridge(path, "--first-within", "30")
        out, err = process.communicate(b"hello", timeout=30)
    assert (process.returncode, out, err) == (0, b"hello", b"")
    assert events == ["eof"]


def test_a_bad_command_line_exits_2_with_the_usage(tmp_path: Path) -> None:
    for extra in (
        ["--wait"],
        ["--wait", "soon"],
        ["--wait", "-1"],
        ["--first-within"],
        ["--first-within", "-1"],
        ["--first-within", "nan"],
        ["--frobnicate"],
        ["two"],
    ):
        process = bridge(tmp_path / "agent.sock", *extra)
        _out, err = process.communicate(b"", timeout=30)
        assert process.returncode == 2, (extra, err)
        assert b"usage: python -m cubicle_guest.bridge PATH [--wait SECONDS]" in err
    process = subprocess.Popen(
        [sys.executable, "-m", "cubicle_guest.bridge"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _out, err = process.communicate(b"", timeout=30)
    assert process.returncode == 2 and b"usage" in err
