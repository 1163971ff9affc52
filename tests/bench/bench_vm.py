"""VM backend: cold boot vs warm restore → first painted screenshot, and teardown (libvirt/QEMU).

"Ours" is the warm start (restore of a saved golden state onto a fresh overlay); the peer is a
cold boot of the same image (PVH vmlinux + tiny initramfs + init script). Both run in this one
run, side by side; read the ratio. "warm copy" is a warm start while the saved state's own
domain runs (another sandbox holds the slot): restored from a copy of the state made for it,
where it used to cold-boot. "pool claim" and "allow: pool claim" are claims from warm pools
(``cubicle pool fill --backend vm``, in a private pool folder) of ``none`` and ``allow:``
members: an ``allow:`` sandbox always cold-boots, so its pool is what makes it fast. An
``allow:`` sandbox (its own libvirt network, firewall rules and egress proxy; always a cold boot)
is measured too, for its teardown. Teardown is the
time until everything of the sandbox is gone (domain, QEMU, overlay, network, rules, proxy):
``destroy`` returns only then. The accelerator used (kvm/tcg/hvf) and why is printed first.

Targets (issue 19, under TCG): warm restore -> painted screenshot p50 <= 1.0 s, cold <= 10 s,
teardown <= 1 s; a pool claim -> first screenshot <= 150 ms (the Docker pools' target).
Environment: CUBICLE_BENCH_VM_REPEAT (default 3) rounds of each.
"""

from __future__ import annotations

import io
import os
import time

from PIL import Image

from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.pool import admin
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm.image import load_image
from cubicle.orchestrator.sandbox import Sandbox, wait_ready
from cubicle_guest.errors import CubicleError
from tests.bench.bench_pool import private_pools, wait_refilled
from tests.bench.report import Report, Sample

ALLOW = NetworkPolicy.parse("allow:example.invalid")
TARGETS = {
    "warm": 1.0,
    "warm copy": 1.0,
    "pool claim": 0.15,
    "allow: pool claim": 0.15,
    "cold": 10.0,
    "warm teardown": 1.0,
    "warm copy teardown": 1.0,
    "cold teardown": 1.0,
    "allow: teardown": 1.0,
}


def _to_painted(provider: VmProvider, sandbox_id: str, started: float) -> tuple[float, float]:
    """Seconds from ``started`` to: the agent answering hello, and the first screenshot that is
    not one colour (the desktop drawn), over that one connection."""
    deadline = started + 300
    wait_ready(provider, sandbox_id, timeout=deadline - time.perf_counter())
    ready = time.perf_counter() - started
    with provider.connect(sandbox_id, timeout=10) as client:
        client.hello(timeout=10)
        while True:
            blob = client.screenshot(format="png").blob
            with Image.open(io.BytesIO(blob)) as image:
                if image.getcolors(1) is None:
                    return ready, time.perf_counter() - started
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{sandbox_id}: no painted screenshot in time")
            time.sleep(0.05)


def _measure(
    kind: str,
    provider: VmProvider,
    spec: SandboxSpec,
    timings: dict[str, list[float]],
    report: Report,
) -> None:
    """One sandbox of ``kind``: create -> painted screenshot, then its teardown."""
    started = time.perf_counter()
    info = provider.create(spec)
    created = time.perf_counter() - started
    try:
        ready, painted = _to_painted(provider, info.id, started)
        timings[kind].append(painted)
        if kind == "warm":
            timings["warm create"].append(created)
            timings["warm hello"].append(ready)
    finally:
        started = time.perf_counter()
        provider.destroy(info.id)
        timings[f"{kind} teardown"].append(time.perf_counter() - started)
    expected = {"warm": "warm:", "warm copy": "warm-copy:"}.get(kind, info.detail["start"])
    if not info.detail["start"].startswith(expected):
        report.line(f"note: {info.id} ({kind}) started {info.detail['start']}")


def _pool_claims(network: NetworkPolicy, repeat: int, report: Report) -> list[float]:
    """Fill a VM pool of ``repeat`` members of ``network``, then time each claim from
    ``Sandbox.create`` to its first screenshot (painted: a member is parked only once its
    desktop answered), each once the pool is full again (as ``bench_pool``'s claims); the
    claimed sandboxes and the pool are removed."""
    spec = SandboxSpec(network=network, ttl_s=1800, cpus=0.97)  # a shape only this bench asks for
    record, _ = admin.start("vm", spec, repeat, progress=report.line, ready_timeout_s=300)
    seconds = []
    try:
        for _ in range(repeat):
            wait_refilled(record.key, timeout_s=300)  # as bench_pool: no refill restore beside it
            said: list[str] = []
            started = time.perf_counter()
            with Sandbox.create("vm", spec=spec, progress=said.append) as sandbox:
                with sandbox.connect() as client:
                    client.screenshot(format="png")
                seconds.append(time.perf_counter() - started)
            if not any("claimed from a warm pool" in line for line in said):
                report.line(f"note: {sandbox.id} ({network}) was started, not claimed")
    finally:
        admin.drain(record.key)
    return seconds


def run(report: Report) -> None:
    if os.geteuid() != 0:
        raise report.Skip("needs root (qemu:///system and the VM image under /var/lib/cubicle)")
    warm = VmProvider()
    cold = VmProvider(warm_slots=0)
    one_slot = VmProvider(warm_slots=1)  # held by one sandbox: the next restores from a copy
    try:
        warm.conn.getLibVersion()
        warm.image = cold.image = one_slot.image = warm.build_image(progress=report.line)
        warm.warm_up(SandboxSpec(), slots=1, progress=report.line)
    except CubicleError as exc:
        raise report.Skip(f"libvirt/VM image unavailable: {exc}") from None
    base_bytes = load_image(warm.image).manifest.get("base_bytes", 0)
    report.line(f"VM image {warm.image}: base disk {base_bytes / 1e6:.0f} MB (qcow2)")
    report.line(f"accelerator: {warm.accelerator.kind} ({warm.accelerator.reason})")
    repeat = int(os.environ.get("CUBICLE_BENCH_VM_REPEAT", "3"))
    names = ("cold", "warm", "warm create", "warm hello", "warm copy", "allow:")
    timings: dict[str, list[float]] = {k: [] for k in names}
    timings.update({f"{k} teardown": [] for k in ("cold", "warm", "warm copy", "allow:")})
    for _ in range(repeat):
        for kind, provider, spec in (
            ("cold", cold, SandboxSpec()),
            ("warm", warm, SandboxSpec()),
            ("warm copy", one_slot, SandboxSpec()),
            ("allow:", cold, SandboxSpec(network=ALLOW)),
        ):
            holder = one_slot.create(SandboxSpec()) if kind == "warm copy" else None
            try:
                _measure(kind, provider, spec, timings, report)
            finally:
                if holder is not None:
                    one_slot.destroy(holder.id)
    with private_pools():
        for kind, network in (
            ("pool claim", NetworkPolicy.parse("none")),
            ("allow: pool claim", ALLOW),
        ):
            timings[kind] = _pool_claims(network, repeat, report)
    samples = {}
    for name, seconds in timings.items():
        if "teardown" in name:
            label = f"vm {name} (everything gone)"
        elif name == "warm create":
            label = "vm warm: create() returned (restore done)"
        elif name == "warm hello":
            label = "vm warm: the agent answered hello"
        elif name.endswith("pool claim"):
            label = f"vm {name} -> first screenshot"
        else:
            label = f"vm {name} create -> first painted screenshot"
        sample = Sample(label, seconds)
        report.samples.append(sample)
        samples[name] = sample
        report.line(
            f"{sample.name:<58} p50 {sample.p50 * 1000:9.0f} ms   p95 {sample.p95 * 1000:9.0f} ms"
            f"   (n={len(seconds)})"
        )
    report.ratio(samples["warm"], samples["cold"])
    if warm.accelerator.kind == "tcg":
        for name, limit in TARGETS.items():
            report.target(samples[name], limit)
