"""The host's process scan (cubicle.orchestrator.hostprocs): labelled ``python -m MODULE OPTION
VALUE`` processes are found by their exact argv and this user's only, ended by pid (SIGKILL after
the timeout for one that ignores SIGTERM); processes that vanish mid-scan and zombies are skipped; a
VM egress proxy is found by its ``--label``. (A domain's QEMU: tests/vm/test_vm_units.py.)"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle.egress.bundle import BUNDLE_NAME
from cubicle.orchestrator.hostprocs import alive, argv_of, module_pids, processes, stop_pids
from cubicle.orchestrator.providers.vm.network import stop_proxy
from tests.support.processes import stop_process

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
"""A Python another user can run (this venv's may live under root's private home)."""
IDLE = """\
import signal, sys
if sys.argv[1] == "--stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    signal.pause()
"""
"""A labelled process that only waits to be ended (``--stubborn``: it ignores SIGTERM)."""


class Starter:
    """``start(OPTION, VALUE, *more, user=None)``: ``python -m MODULE OPTION VALUE ...`` started
    and ready (its argv is its own, its SIGTERM handler set). ``module`` is a name of this test
    alone: no other test's or user's process carries it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.module = f"cbl_idle_{secrets.token_hex(4)}"
        (folder / f"{self.module}.py").write_text(IDLE)
        self.started: list[subprocess.Popen[str]] = []

    def __call__(self, *args: str, user: int | None = None) -> subprocess.Popen[str]:
        python = sys.executable if user is None else SYSTEM_PYTHON
        return self.run([python, "-m", self.module, *args], user=user)

    def script(self, name: str, *args: str) -> subprocess.Popen[str]:
        """``python FOLDER/NAME ARGS...``: the same idle program, started as a script."""
        (self.folder / name).write_text(IDLE)
        return self.run([sys.executable, str(self.folder / name), *args])

    def run(self, argv: list[str], user: int | None = None) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            argv,
            cwd=self.folder,
            stdout=subprocess.PIPE,
            text=True,
            user=user,
        )
        self.started.append(process)
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n", f"exit code {process.wait(10)}"
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.kill()
            stop_process(process)


@pytest.fixture
def start() -> Iterator[Starter]:
    """A :class:`Starter`; every process it started is ended at teardown."""
    with tempfile.TemporaryDirectory(prefix="cbl-procs-", dir="/tmp") as folder:
        os.chmod(folder, 0o755)  # readable by the other user of the uid test
        starter = Starter(Path(folder))
        try:
            yield starter
        finally:
            starter.stop_all()


def test_labelled_processes_are_found_by_their_exact_argv(start: Starter) -> None:
    one = start("--sandbox", "vm-1")
    two = start("--sandbox", "vm-2")
    start("--sandbox", "vm-1", "--more")  # another argv: never one of them
    start("--pool", "vm-1")
    assert module_pids(start.module, "--sandbox", "vm-1") == [one.pid]
    assert sorted(module_pids(start.module, "--sandbox")) == sorted([one.pid, two.pid])
    assert module_pids(start.module, "--sandbox", "vm-3") == []
    assert module_pids(start.module + "x", "--sandbox") == []
    seen = {process.pid: process.argv for process in processes()}
    label = (b"-m", start.module.encode(), b"--sandbox", b"vm-1")
    assert seen[one.pid] == (sys.executable.encode(), *label)
    assert argv_of(one.pid) == seen[one.pid]


def test_stop_pids_terminates_and_kills_what_ignores_sigterm(start: Starter) -> None:
    polite = start("--sandbox", "vm-1")
    stubborn = start("--stubborn", "vm-1")
    stop_pids([polite.pid, stubborn.pid], timeout_s=0.3)
    assert polite.wait(5) == -signal.SIGTERM
    assert stubborn.wait(5) == -signal.SIGKILL
    stop_pids([polite.pid], timeout_s=0.3)  # already gone (reaped): nothing to do, no error


def test_a_process_that_exits_mid_scan_is_skipped_and_a_zombie_is_not_alive(
    start: Starter,
) -> None:
    doomed = start("--sandbox", "vm-1")
    scan = processes()
    first = next(scan)  # /proc is listed now (in pid order): the listing names the doomed pid
    assert first.pid < doomed.pid
    doomed.kill()
    doomed.wait(5)
    assert doomed.pid not in {process.pid for process in scan}
    assert argv_of(doomed.pid) is None
    assert not alive(doomed.pid)

    zombie = start("--sandbox", "vm-2")
    zombie.kill()
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # it has exited; not reaped yet
    assert Path(f"/proc/{zombie.pid}").exists()
    assert not alive(zombie.pid)
    assert zombie.pid not in {process.pid for process in processes()}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason=f"no {SYSTEM_PYTHON}")
def test_another_users_process_with_the_label_is_never_ours(start: Starter) -> None:
    theirs = start("--sandbox", "vm-1", user=NOBODY)
    ours = start("--sandbox", "vm-1")
    assert module_pids(start.module, "--sandbox", "vm-1") == [ours.pid]
    assert theirs.pid in {process.pid for process in processes(uid=NOBODY)}
    assert theirs.pid not in {process.pid for process in processes(uid=os.geteuid())}
    assert theirs.pid in {process.pid for process in processes()}


def test_the_vm_egress_proxy_of_a_sandbox_is_found_by_its_label_and_only_it_ended(
    start: Starter,
) -> None:
    ours, theirs = f"vm-{secrets.token_hex(5)}", f"vm-{secrets.token_hex(5)}"
    (start.folder / "home" / "proxy" / "0123").mkdir(parents=True)
    (start.folder / "elsewhere").mkdir()
    script = f"home/proxy/0123/{BUNDLE_NAME}"  # as vm_network.proxy_script lays it out
    proxy = start.script(script, "--label", ours)
    neighbour = start.script(script, "--label", theirs)
    # the same label under another backend directory (another user's session, another home)
    elsewhere = start.script(f"elsewhere/{BUNDLE_NAME}", "--label", ours)
    # no record in a run folder: found by its command line alone, among home's proxies only
    stop_proxy(ours, None, home=start.folder / "home")
    assert proxy.wait(5) == -signal.SIGTERM
    assert neighbour.poll() is None and elsewhere.poll() is None
