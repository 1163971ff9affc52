"""The engine box leaves nothing behind — even when its dockerd is killed with containers running.

A fresh box gets a tiny image (busybox, imported through the API), a running container on its
default bridge and one on an ``internal`` network (so dockerd has written NAT and isolation
rules), then its dockerd is killed with SIGKILL: containerd, the shims and the containers live
on. :meth:`EngineBox.close` must still remove every process, the namespace, the veth pair,
cgroups, mounts and files, and the host's own iptables rules must never have mentioned the box.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import tarfile
from pathlib import Path

import docker
import pytest

from tests.remote.enginebox import EngineBox, leftovers

pytestmark = [pytest.mark.remote]

BUSYBOX = Path("/bin/busybox")


def _busybox_image() -> bytes:
    """A root file system with only a static busybox, as an image tar for ``docker import``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(BUSYBOX, arcname="bin/busybox")
        link = tarfile.TarInfo("bin/sleep")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
    return data.getvalue()


def _host_rules() -> str:
    done = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True)
    return done.stdout


def test_close_after_dockerd_is_killed_leaves_nothing() -> None:
    if not BUSYBOX.is_file():
        pytest.skip("busybox-static is not installed (scripts/host-packages/vm.txt)")
    box = EngineBox()
    try:
        box.start()
        client = docker.DockerClient(base_url=f"unix://{box.socket}", timeout=60)
        try:
            client.api.import_image_from_data(_busybox_image(), repository="box-busybox", tag="1")
            internal = client.networks.create("box-internal", driver="bridge", internal=True)
            for network in ("bridge", internal.name):
                client.containers.run(
                    "box-busybox:1", ["/bin/sleep", "600"], detach=True, network=network
                )
            rules = box._in_box("iptables-save")
            assert box.bridge in rules and "DOCKER-ISOLATION" in rules  # dockerd's, in the box
        finally:
            client.close()
        host_rules = _host_rules()
        assert box.bridge not in host_rules and box.host_if not in host_rules
        os.kill(box.processes["dockerd"].pid, signal.SIGKILL)
        box.processes["dockerd"].wait()
        assert leftovers(box.name, box.folder, box.host_if)  # shims and containers live on
    finally:
        box.close()
    assert leftovers(box.name, box.folder, box.host_if) == []
    host_rules = _host_rules()
    assert box.bridge not in host_rules and box.host_if not in host_rules
