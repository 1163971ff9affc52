"""Files in and out of a Docker sandbox: Sandbox.upload/download throughput against docker cp.

``docker cp`` cannot write into a cubicle sandbox at all (its root file system is read-only and
the home is a tmpfs the engine's archive API does not reach), so the upload reference is
``docker cp`` into a plain container of the same image; downloads are compared on the same
file of the sandbox (the Chromium binary, ~300 MB).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cubicle.orchestrator.sandbox import Sandbox
from tests.bench.bench_docker import docker_or_skip
from tests.bench.report import Report, Sample

UPLOAD_MB = 200
GUEST_FILE = "/usr/lib/chromium/chromium"
REPEAT = 3


def _rate(report: Report, sample: Sample, size: int) -> None:
    report.line(f"{sample.name}: {size / sample.p50 / 1e6:.0f} MB/s (p50 of {REPEAT})")


def _docker_cp(*args: str) -> None:
    subprocess.run(["docker", "cp", *args], check=True, capture_output=True, timeout=600)


def run(report: Report) -> None:
    provider = docker_or_skip()
    docker_cli = shutil.which("docker")
    with tempfile.TemporaryDirectory(prefix="bench-files-") as folder:
        work = Path(folder)
        local = work / "upload.bin"
        with open(local, "wb") as stream:
            for _ in range(UPLOAD_MB):
                stream.write(os.urandom(1024 * 1024))
        size = local.stat().st_size
        with Sandbox.create() as sandbox:
            up = report.measure(
                f"Sandbox.upload {UPLOAD_MB} MB",
                lambda: sandbox.upload(local, "/home/cubicle/"),
                repeat=REPEAT,
                warmup=0,
            )
            _rate(report, up, size)
            down_dir = work / "down"

            def download() -> None:
                shutil.rmtree(down_dir, ignore_errors=True)
                down_dir.mkdir()
                sandbox.download(GUEST_FILE, down_dir)

            down = report.measure(
                "Sandbox.download chromium binary", download, repeat=REPEAT, warmup=0
            )
            guest_size = (down_dir / "chromium").stat().st_size
            _rate(report, down, guest_size)
            if docker_cli is None:
                report.line("peer docker cp: skipped (no docker command on this host)")
                return
            name = provider._guest(sandbox.id).name

            def docker_download() -> None:
                shutil.rmtree(down_dir, ignore_errors=True)
                down_dir.mkdir()
                _docker_cp(f"{name}:{GUEST_FILE}", str(down_dir))

            peer_down = report.measure(
                "peer docker cp out (same file)", docker_download, repeat=REPEAT, warmup=0
            )
            _rate(report, peer_down, guest_size)
            report.ratio(down, peer_down)
        plain = provider.client.containers.run(
            provider.default_image(), entrypoint=["sleep", "infinity"], detach=True, remove=True
        )
        try:
            peer_up = report.measure(
                f"peer docker cp in {UPLOAD_MB} MB (plain container)",
                lambda: _docker_cp(str(local), f"{plain.name}:/tmp/"),
                repeat=REPEAT,
                warmup=0,
            )
            _rate(report, peer_up, size)
            report.ratio(up, peer_up)
        finally:
            plain.remove(force=True)
