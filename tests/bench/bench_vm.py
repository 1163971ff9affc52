"""VM backend: cold boot vs warm restore → first painted screenshot, and teardown (libvirt/QEMU).

"Ours" is the warm start (restore of a saved golden state onto a fresh overlay); the peer is a
cold boot of the same image (PVH vmlinux + tiny initramfs + init script). Both run in this one
run, side by side; read the ratio. The accelerator used (kvm/tcg/hvf) and why is printed first.
Environment: CUBICLE_BENCH_VM_REPEAT (default 3) rounds of each.
"""

from __future__ import annotations

import io
import os
import time

from PIL import Image

from guest.errors import CubicleError
from orchestrator.provider import SandboxSpec
from orchestrator.providers.vm import VmProvider
from orchestrator.providers.vm.image import load_image
from orchestrator.sandbox import wait_ready
from tests.bench.report import Report, Sample


def _first_painted_screenshot(provider: VmProvider, sandbox_id: str, deadline: float) -> None:
    wait_ready(provider, sandbox_id, timeout=deadline - time.monotonic())
    with provider.connect(sandbox_id, timeout=10) as client:
        client.hello(timeout=10)
        while True:
            blob = client.call("screenshot", {"format": "png"}).blob
            with Image.open(io.BytesIO(blob)) as image:
                if image.getcolors(1) is None:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sandbox_id}: no painted screenshot in time")
            time.sleep(0.1)


def run(report: Report) -> None:
    if os.geteuid() != 0:
        raise report.Skip("needs root (qemu:///system and the VM image under /var/lib/cubicle)")
    warm = VmProvider()
    cold = VmProvider(warm_slots=0)
    try:
        warm.conn.getLibVersion()
        warm.image = cold.image = warm.build_image(progress=report.line)
        warm.warm_up(SandboxSpec(), slots=1, progress=report.line)
    except CubicleError as exc:
        raise report.Skip(f"libvirt/VM image unavailable: {exc}") from None
    base_bytes = load_image(warm.image).manifest.get("base_bytes", 0)
    report.line(f"VM image {warm.image}: base disk {base_bytes / 1e6:.0f} MB (qcow2)")
    report.line(f"accelerator: {warm.accelerator.kind} ({warm.accelerator.reason})")
    repeat = int(os.environ.get("CUBICLE_BENCH_VM_REPEAT", "3"))
    timings: dict[str, list[float]] = {
        k: [] for k in ("cold", "warm", "cold teardown", "warm teardown")
    }
    for _ in range(repeat):
        for kind, provider in (("cold", cold), ("warm", warm)):
            started = time.monotonic()
            info = provider.create(SandboxSpec())
            try:
                _first_painted_screenshot(provider, info.id, started + 300)
                timings[kind].append(time.monotonic() - started)
            finally:
                started = time.monotonic()
                provider.destroy(info.id)
                timings[f"{kind} teardown"].append(time.monotonic() - started)
            if kind == "warm" and not info.detail["start"].startswith("warm"):
                report.line(f"note: {info.id} was not restored warm ({info.detail['start']})")
    samples = {}
    for name, seconds in timings.items():
        sample = Sample(
            f"vm {name} create -> first painted screenshot"
            if "teardown" not in name
            else f"vm {name}",
            seconds,
        )
        report.samples.append(sample)
        samples[name] = sample
        report.line(
            f"{sample.name:<58} p50 {sample.p50 * 1000:9.0f} ms   p95 {sample.p95 * 1000:9.0f} ms"
            f"   (n={len(seconds)})"
        )
    report.ratio(samples["warm"], samples["cold"])
