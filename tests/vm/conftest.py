"""Fixtures of the VM backend's tests (marker ``vm``).

``vm_provider``: a :class:`VmProvider` whose image for the current sources is built once per test
run (a no-op when up to date; the build also saves the warm state of the default shape). When
libvirt cannot run on this machine (not installed, or ``scripts/ensure-libvirt`` cannot start
it), the tests skip and say why; any other failure fails them.

``leak_check``: after the test, no domain, QEMU process or per-sandbox directory of the
sandboxes it created is left.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import EngineUnavailable
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm.virt import open_connection

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMES: dict[str, float] = {}


def _libvirt_reason() -> str | None:
    """None when libvirt answers (started by scripts/ensure-libvirt if needed), else why not."""
    if shutil.which("virsh") is None or shutil.which("qemu-system-x86_64") is None:
        return "libvirt/QEMU are not installed (scripts/host-packages/vm.txt)"
    if importlib.util.find_spec("libvirt") is None:
        return "libvirt-python is not installed in this venv (pip install libvirt-python)"
    try:
        open_connection().close()
        return None
    except EngineUnavailable as exc:
        first = str(exc)
    done = subprocess.run(
        [str(REPO / "scripts" / "ensure-libvirt")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return f"libvirt cannot run here: {first}; scripts/ensure-libvirt: {done.stderr.strip()}"
    return None


@pytest.fixture(scope="session")
def vm_provider() -> Iterator[VmProvider]:
    """The provider, with the image built for this run pinned (``CUBICLE_VM_IMAGE``, inherited by
    ``Sandbox.create("vm")`` and child processes), so edits to the sources during the run do not
    make later tests look for another build."""
    reason = _libvirt_reason()
    if reason is not None:
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("the VM tests need root (building the image, qemu:///system files)")
    provider = VmProvider()
    started = time.monotonic()
    ref = provider.build_image(progress=lambda line: print(f"[vm image] {line}", flush=True))
    BUILD_TIMES["vm image build (incl. warm state)"] = time.monotonic() - started
    # the build's golden guests are transient domains: none stays defined after it
    defined = [n for n in provider.conn.listDefinedDomains() if n.startswith("cubicle-")]
    assert defined == [], f"the image build left defined domains: {defined}"
    previous = os.environ.get("CUBICLE_VM_IMAGE")
    os.environ["CUBICLE_VM_IMAGE"] = provider.image = ref
    yield provider
    if previous is None:
        os.environ.pop("CUBICLE_VM_IMAGE", None)
    else:
        os.environ["CUBICLE_VM_IMAGE"] = previous


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, seconds in BUILD_TIMES.items():
        terminalreporter.write_line(f"{name}: {seconds:.1f} s")


def qemu_pids_using(path: Path) -> list[int]:
    """Pids of processes whose command line mentions ``path`` (QEMU names its overlay/socket)."""
    needle = str(path).encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def assert_gone(provider: VmProvider, sandbox_id: str) -> None:
    """No domain, no QEMU process and no per-sandbox directory remain for ``sandbox_id``."""
    run = provider.home / "run" / sandbox_id
    assert provider.describe(sandbox_id) is None, f"domain of {sandbox_id} still exists"
    assert qemu_pids_using(run) == [], f"QEMU of {sandbox_id} still runs"
    assert not run.exists(), f"{run} (overlay, socket, console) still exists"


@pytest.fixture
def leak_check(vm_provider: VmProvider) -> Iterator[list[str]]:
    """Append the ids of sandboxes you create; after the test they must all be gone."""
    created: list[str] = []
    yield created
    try:
        for sandbox_id in created:
            assert_gone(vm_provider, sandbox_id)
    finally:
        for sandbox_id in created:
            vm_provider.destroy(sandbox_id)
