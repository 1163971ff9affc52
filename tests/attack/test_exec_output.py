"""Exec output is cut to fit what is sent, never lost (attack row 11, as of eff2174).

The 1 MiB cap counted raw bytes, but the reply carries them as JSON: a NUL byte is sent as the six
bytes ``\\u0000``, so 1 MiB of NULs overflowed the frame, the agent answered ``too_large`` and all
the output — and the exit code — was lost.
"""

from __future__ import annotations

import json

import pytest

from cubicle_guest import protocol
from tests.orchestrator.conftest import Tracker

pytestmark = [pytest.mark.attack, pytest.mark.docker]

WRITE = (
    "import sys; sys.stdout.buffer.write(bytes([int(sys.argv[1])]) * int(sys.argv[2])); "
    "sys.stderr.write('done'); sys.exit(7)"
)


@pytest.mark.parametrize(
    ("byte", "size"),
    [(0, 2**20), (0x1B, 3 * 2**20), (0xFF, 2**20), (ord('"'), 2**20)],
    ids=["nul-1MiB", "escape-3MiB", "invalid-utf8-1MiB", "quote-1MiB"],
)
def test_row11_output_that_escapes_large_is_cut_and_flagged_not_lost(
    sandboxes: Tracker, byte: int, size: int
) -> None:
    sandbox = sandboxes.create()
    result = sandbox.exec(["python3", "-c", WRITE, str(byte), str(size)])
    assert (result.exit_code, result.stderr, result.timed_out) == (7, "done", False)
    assert result.stdout_truncated is True and result.stderr_truncated is False
    expected = bytes([byte]).decode("utf-8", "replace")
    assert result.stdout and set(result.stdout) == {expected}
    sent = len(json.dumps(result.stdout, ensure_ascii=False).encode()) - 2
    # cut to what fits, not far below: the next character would not have fitted
    assert protocol.MAX_EXEC_OUTPUT_BYTES - 6 < sent <= protocol.MAX_EXEC_OUTPUT_BYTES


def test_output_that_fits_once_escaped_arrives_whole(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    size = protocol.MAX_EXEC_OUTPUT_BYTES // 6  # every NUL escaped: exactly at the cap
    result = sandbox.exec(["python3", "-c", WRITE, "0", str(size)])
    assert result.exit_code == 7
    assert (result.stdout, result.stdout_truncated) == ("\0" * size, False)
