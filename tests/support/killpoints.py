"""Stop a real ``cubicle`` command at a named point of a sandbox's creation, to ``kill -9`` it there
(or to run ``gc`` while it is paused there, mid-create).

The child runs ``cubicle.orchestrator.cli.main(ARGS)`` with the engine libraries' create/start calls
wrapped: the first time it reaches the chosen point it prints ``at POINT SANDBOX_ID`` and waits for
a line on stdin (``go``) before going on. Nothing in the product knows about this. Points:

==================  ==============================================================================
``network``         Docker: the sandbox's first network exists (its own outward network, of
                    ``open`` and ``allow:``; the internal one of ``allow:`` comes next). VM: the
                    libvirt network exists (no firewall rule, no proxy yet)
``proxy``           Docker: the egress proxy container runs. VM: network, firewall rules and proxy
``before-container`` Docker: just before the guest container is created (network/proxy made).
                    VM: just before the domain is created or restored (run folder, overlay and
                    any network pieces made)
``state-copy``      VM: every warm slot busy, the copy of a slot's saved state for this sandbox
                    is made in its run folder (before its restore)
``container``       Docker: the guest container runs (its agent not yet asked). VM: the domain runs
                    (cold boot or warm restore)
``ready``           the ready mark is set (``cubicle up`` is then about to print and exit)
==================  ==============================================================================
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys
import docker.models.containers as C
import docker.models.networks as N
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.cli import main

stop_at, argv = sys.argv[1], sys.argv[2:]


paused = set()


def pause(point, sandbox_id):
    if point == stop_at and point not in paused:  # once: at the first of several networks
        paused.add(point)
        print(f"at {point} {sandbox_id}", flush=True)
        sys.stdin.readline()


net_create = N.NetworkCollection.create


def network_create(self, name, *args, **kwargs):
    made = net_create(self, name, *args, **kwargs)
    pause("network", (kwargs.get("labels") or {}).get(L.SANDBOX, ""))
    return made


N.NetworkCollection.create = network_create
ct_create = C.ContainerCollection.create


def container_create(self, image, command=None, **kwargs):
    labels = kwargs.get("labels") or {}
    if labels.get(L.ROLE) == "guest":
        pause("before-container", labels.get(L.SANDBOX, ""))
    return ct_create(self, image, command, **kwargs)


C.ContainerCollection.create = container_create
ct_start = C.Container.start


def container_start(self, *args, **kwargs):
    done = ct_start(self, *args, **kwargs)
    role = self.labels.get(L.ROLE)
    pause({"guest": "container", "egress": "proxy"}.get(role, role), self.labels.get(L.SANDBOX))
    return done


C.Container.start = container_start

try:
    from cubicle.orchestrator.providers.vm import network as vm_network
    from cubicle.orchestrator.providers.vm import provider as vm_provider
    from cubicle.orchestrator.providers.vm import warm_start as vm_warm_start
    from cubicle.orchestrator.providers.vm import VmProvider
except ImportError:
    pass
else:
    vm_create_network = vm_network._create_network

    def create_network(conn, sandbox_id, *args, **kwargs):
        made = vm_create_network(conn, sandbox_id, *args, **kwargs)
        pause("network", sandbox_id)
        return made

    vm_network._create_network = create_network
    vm_domain_xml = vm_provider.domain_xml

    def domain_xml(plan):
        pause("before-container", plan.labels[L.SANDBOX])
        return vm_domain_xml(plan)

    vm_provider.domain_xml = domain_xml
    vm_retarget = vm_warm_start.retarget_saved_xml

    def retarget_saved_xml(saved, **kwargs):
        pause("before-container", kwargs["labels"][L.SANDBOX])
        return vm_retarget(saved, **kwargs)

    vm_warm_start.retarget_saved_xml = retarget_saved_xml
    vm_clone = vm_warm_start.clone_saved_state

    def clone_saved_state(source, target, **kwargs):
        vm_clone(source, target, **kwargs)
        pause("state-copy", target.parent.name)  # the run folder's name is the sandbox id

    vm_warm_start.clone_saved_state = clone_saved_state
    vm_warm_create = vm_warm_start.WarmStarter.create

    def warm_create(self, sandbox_id, *args, **kwargs):
        info = vm_warm_create(self, sandbox_id, *args, **kwargs)
        if info is not None:
            pause("container", sandbox_id)
        return info

    vm_warm_start.WarmStarter.create = warm_create
    vm_setup = vm_network.setup

    def network_setup(conn, sandbox_id, *args, **kwargs):
        made = vm_setup(conn, sandbox_id, *args, **kwargs)
        pause("proxy", sandbox_id)
        return made

    vm_network.setup = network_setup
    vm_setup_channel = vm_network.setup_channel

    def setup_channel(sandbox_id, *args, **kwargs):
        made = vm_setup_channel(sandbox_id, *args, **kwargs)
        pause("proxy", sandbox_id)
        return made

    vm_network.setup_channel = setup_channel
    vm_cold = VmProvider._create_cold

    def create_cold(self, sandbox_id, *args, **kwargs):
        info = vm_cold(self, sandbox_id, *args, **kwargs)
        pause("container", sandbox_id)
        return info

    VmProvider._create_cold = create_cold

from cubicle.orchestrator.providers.docker.provider import DockerProvider

for cls in [DockerProvider] + ([VmProvider] if "VmProvider" in globals() else []):
    if not hasattr(cls, "mark_ready"):  # a cubicle without ready marks (to show the old holes)
        continue

    def wrap(original):
        def mark_ready(self, sandbox_id):
            original(self, sandbox_id)
            pause("ready", sandbox_id)
        return mark_ready
    cls.mark_ready = wrap(cls.mark_ready)
sys.exit(main(argv))
"""


@dataclass
class Paused:
    """A ``cubicle`` command stopped at ``point`` while creating ``sandbox_id``."""

    process: subprocess.Popen[str]
    point: str
    sandbox_id: str

    def kill9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.communicate(timeout=30)  # reaps it and closes the pipes

    def resume(self, timeout: float = 240.0) -> tuple[int, str, str]:
        """Let it go on; its exit status, stdout and stderr."""
        out, err = self.process.communicate("go\n", timeout=timeout)
        return self.process.returncode, out, err


@contextmanager
def paused_at(
    point: str, *args: str, env: dict[str, str] | None = None, timeout: float = 240.0
) -> Iterator[Paused]:
    """Run ``cubicle ARGS`` until ``point``; yield it paused there. Killed (by pid) on exit if it
    still runs. :raises AssertionError: it ended without reaching ``point``."""
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, point, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith(f"at {point} "):
            process.kill()
            out, err = process.communicate(timeout=timeout)
            for word in (line + out).split():  # `up` printed an id: nothing may outlive the test
                if word.startswith(("dk-", "vm-")):
                    subprocess.run(
                        [sys.executable, "-m", "cubicle.orchestrator.cli", "down", word],
                        cwd=REPO,
                        capture_output=True,
                        check=False,
                    )
            raise AssertionError(f"cubicle {' '.join(args)} never reached {point}: {line}{err}")
        yield Paused(process, point, line.split()[2])
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
