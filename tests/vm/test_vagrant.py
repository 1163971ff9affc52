"""``vagrant up`` of the cubicle VM guest (vagrant/Vagrantfile, provider libvirt): the agent
answers on the virtio-serial channel's socket and shows a painted desktop; ``vagrant destroy``
leaves no domain, pool, overlay or QEMU process."""

from __future__ import annotations

import io
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle_guest.client import connect_unix
from tests.vm.conftest import REPO, qemu_pids_using

pytestmark = [pytest.mark.vm, pytest.mark.slow]

DOMAIN = "cubicle-vagrantdefault"


def _vagrant_reason() -> str | None:
    if shutil.which("vagrant") is None:
        return "vagrant is not installed (Debian: apt-get install vagrant vagrant-libvirt)"
    if not any(Path("/usr/share/rubygems-integration/all/gems").glob("vagrant-libvirt-*")):
        return "the vagrant-libvirt plugin is not installed"
    return None


def _virsh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["virsh", "-q", *args], capture_output=True, text=True, check=False)


def test_vagrant_up_reaches_the_agent_and_destroy_leaves_nothing(
    vm_provider: VmProvider, tmp_path: Path
) -> None:
    reason = _vagrant_reason()
    if reason:
        pytest.skip(reason)
    if _virsh("dominfo", DOMAIN).returncode == 0:
        pytest.fail(
            f"a domain {DOMAIN} already exists; remove it (cd vagrant && vagrant destroy -f)"
        )
    image = vm_provider.image
    assert image is not None
    work = (
        vm_provider.home / f"vagrant-test-{secrets.token_hex(3)}"
    )  # QEMU must reach it: not /tmp/pytest-*
    pool = f"cubicle-vagrant-test-{secrets.token_hex(3)}"
    env = {
        **os.environ,
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"),
        "VAGRANT_HOME": str(tmp_path / "home"),
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "CUBICLE_VM_IMAGE_DIR": str(vm_provider.home / "images" / image),
        "CUBICLE_VAGRANT_DIR": str(work),
        "CUBICLE_VAGRANT_POOL": pool,
    }

    def vagrant(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["vagrant", *args],
            cwd=REPO / "vagrant",
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

    try:
        up = vagrant("up", "--provider", "libvirt")
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        with connect_unix(work / "agent.sock", timeout=30, name="vagrant guest") as client:
            hello = client.hello(timeout=180)
            assert hello["screen"] == {"width": 1280, "height": 800}
            deadline = time.monotonic() + 60
            while True:  # the first frame can precede the root window's paint
                png = client.screenshot(format="png").blob
                with Image.open(io.BytesIO(png)) as shot:
                    size, colors = shot.size, shot.getcolors(1)
                if colors is None or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        assert size == (1280, 800)
        assert colors is None, "the desktop screenshot is a single colour"
    finally:
        down = vagrant("destroy", "-f")
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert _virsh("dominfo", DOMAIN).returncode != 0, f"domain {DOMAIN} still exists"
    assert _virsh("pool-info", pool).returncode != 0, f"storage pool {pool} still exists"
    assert not (work / "cubicle-vagrant.qcow2").exists()
    assert qemu_pids_using(work) == []
    shutil.rmtree(work, ignore_errors=True)
