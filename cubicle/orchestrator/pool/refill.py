"""The refiller: a background process that tops a pool up after claims.

``python -m cubicle.orchestrator.pool.refill --pool KEY`` — that exact command line is its label
(:func:`cubicle.orchestrator.hostprocs.module_pids`): ``pool drain`` and ``gc`` find it by it and
end it by pid, whatever happened to whoever started it. It takes the pool's filler lock (none free:
it exits, another filler is at work), makes members until the pool holds its size
(:func:`cubicle.orchestrator.pool.fill.fill`, one at a time), releases the lock and counts once
more (a claim that found the lock held relies on that last count), and exits. It also exits when the
pool is drained or expired, and after :data:`cubicle.orchestrator.pool.fill.MAX_FAILURES` failed
starts in a row. Members it was making when killed are orphans (their creator is gone) that ``gc``
and ``pool drain`` remove. Its log: ``<pool dir>/<key>.log``.

:func:`request` starts one (detached from the caller: ``setsid -f``, so no zombie and no wait).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Final

from cubicle.orchestrator.hostprocs import module_pids, stop_pids
from cubicle.orchestrator.pool import registry
from cubicle.orchestrator.pool.fill import fill, missing
from cubicle.orchestrator.sandbox import teardown_on_signals
from cubicle_guest.errors import CubicleError

__all__ = ["MODULE", "refill_pids", "request", "stop_refills"]

MODULE: Final = "cubicle.orchestrator.pool.refill"
STOP_TIMEOUT_S: Final = 5.0

log = logging.getLogger(MODULE)


def argv(key: str) -> list[str]:
    """The command line that labels the refiller of pool ``key``."""
    return [sys.executable, "-m", MODULE, "--pool", key]


def request(key: str) -> None:
    """Start pool ``key``'s refiller unless a filler holds the pool's lock (it counts again
    before it exits). Returns at once; the refiller outlives the caller."""
    if not registry.lock_free(key):
        return
    setsid = shutil.which("setsid")
    if setsid is None:  # util-linux is everywhere cubicle runs; say so rather than guess
        log.warning("pool %s not refilled: setsid (util-linux) is not installed", key)
        return
    with open(registry.log_path(key), "ab") as out:
        subprocess.run(  # setsid -f forks the refiller off and exits at once
            [setsid, "-f", *argv(key)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            check=False,
            close_fds=True,
        )


def refill_pids(key: str | None = None) -> list[int]:
    """Pids of this user's refillers (of pool ``key``, or of every pool)."""
    return module_pids(MODULE, "--pool", key)


def stop_refills(key: str | None = None) -> list[int]:
    """End the refillers of pool ``key`` (every pool: None) by pid; the pids signalled."""
    pids = refill_pids(key)
    stop_pids(pids, STOP_TIMEOUT_S)
    return pids


def run(key: str) -> int:
    """The refiller's body (see the module doc); its exit code."""
    while True:
        with registry.fill_lock(key, wait_s=0) as held:
            if not held:
                return 0
            record = registry.read(key)
            if record is None:
                return 0
            made = fill(record, progress=log.info, parallel=1)
            log.info("pool %s: %d made", key, len(made))
        record = registry.read(key)
        if record is None or record.expires_at < time.time() or missing(record) == 0:
            return 0


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--pool", required=True, help="the pool key (cubicle pool ls)")
    key = parser.parse_args(args).pool
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s refill {os.getpid()}: %(message)s")
    try:
        with teardown_on_signals():
            return run(key)
    except CubicleError as exc:
        log.error("pool %s: %s", key, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
