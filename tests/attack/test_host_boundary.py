"""Nothing of the host is the guest's to touch (attack rows 2, 3 and 4, as of eff2174).

- Row 2: the guest wrote without limit into a host folder (the bind-mounted run folder).
- Row 3: the host connected to whatever ``/run/cubicle/agent.sock`` pointed at, a path the guest
  controls — a symlink to a host socket made the host (root) talk to it.
- Row 4: the run folder's owner and mode were never checked: a folder another user pre-created
  (``CUBICLE_RUN_DIR``, ``/tmp/cubicle-<uid>``) let that user swap a sandbox's folder.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle_guest.errors import CubicleError
from tests.orchestrator.conftest import Tracker
from tests.support.unix_server import unix_server

pytestmark = [pytest.mark.attack]

NOBODY = 65534
FILL = "open('/run/cubicle/fill', 'wb').write(b'x' * 200 * 2**20)"


@pytest.mark.docker
def test_row2_the_guest_has_no_host_folder_to_fill(
    sandboxes: Tracker, engine: docker.DockerClient
) -> None:
    sandbox = sandboxes.create()
    container = engine.containers.get(f"cubicle-{sandbox.id}")
    writable = [m for m in container.attrs["Mounts"] if m.get("RW", True)]
    assert writable == [], f"host folders the guest can write: {writable}"

    filled = sandbox.exec(["python3", "-c", FILL])
    assert filled.exit_code != 0, "200 MB landed in /run/cubicle"
    assert "No space left on device" in filled.stderr
    # the guest's own folder is a 1 MiB tmpfs; the desktop keeps working
    assert sandbox.exec(["true"]).exit_code == 0


@contextmanager
def host_listener(path: Path) -> Iterator[list[bytes]]:
    """A unix socket on the host recording what every connection to it sends."""
    received: list[bytes] = []

    def record(conn: socket.socket) -> None:
        try:
            received.append(conn.recv(65536))
        except OSError:
            received.append(b"")

    with unix_server(path, record):
        yield received


@pytest.mark.docker
def test_row3_the_host_never_follows_a_path_the_guest_controls(
    sandboxes: Tracker, tmp_path: Path
) -> None:
    sandbox = sandboxes.create()
    # the attack is on the next new connection: drop the one create kept for the first connect
    sandbox.close()
    bait = tmp_path / "host-side.sock"
    swap = (
        "import os, sys; os.rename('/run/cubicle/agent.sock', '/run/cubicle/moved.sock'); "
        "os.symlink(sys.argv[1], '/run/cubicle/agent.sock')"
    )
    with host_listener(bait) as received:
        assert sandbox.exec(["python3", "-c", swap, str(bait)]).exit_code == 0
        with pytest.raises(CubicleError) as caught:
            sandbox.connect(timeout=1.0).close()
    assert received == [], f"the host connected to the guest's symlink and sent {received!r}"
    # the failure is the guest's own: its bridge found no agent at the path inside the guest
    assert "/run/cubicle/agent.sock" in str(caught.value)


@pytest.fixture
def others_folder(tmp_path: Path) -> Path:
    """A world-writable folder owned by another user (``nobody``), as that user would leave it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    folder.chmod(0o777)
    tmp_path.chmod(0o755)
    return folder


@pytest.mark.docker
def test_row4_docker_keeps_nothing_in_a_run_folder_others_can_write(
    sandboxes: Tracker, others_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUBICLE_RUN_DIR", str(others_folder))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(others_folder))
    sandbox = sandboxes.create()
    assert sandbox.exec(["true"]).exit_code == 0
    assert list(others_folder.iterdir()) == [], "the sandbox keeps files another user can swap"


def test_row4_a_vm_home_others_can_write_is_refused_naming_it(others_folder: Path) -> None:
    from cubicle.orchestrator.providers.vm import VmProvider  # noqa: PLC0415 — libvirt-python is optional

    provider = VmProvider(home=others_folder / "vm", uri="test:///default")
    with pytest.raises(ConfigError, match="refusing the host folder") as caught:
        provider.create(SandboxSpec())
    assert str(others_folder) in str(caught.value)
    assert list(others_folder.iterdir()) == [], "nothing may be created in another user's folder"


@pytest.mark.docker
def test_the_docker_agent_has_no_host_socket(provider: DockerProvider) -> None:
    with pytest.raises(CubicleError, match="exec stream"):
        provider.agent_socket("dk-0123456789")
