"""The VM initramfs (cubicle/orchestrator/providers/vm/build.py): Debian's modules go in without
their appended signatures (the guest kernel would hash and RSA-check each one as it loads it: ~0.4 s
of a cold boot under TCG), in dependency order, in a cpio the kernel unpacks."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ImageBuildError
from cubicle.orchestrator.providers.vm.build import (
    INITRAMFS_MODULES,
    MODULE_SIGNATURE_MAGIC,
    initramfs,
    unsigned_module,
)


def _signed(body: bytes, signature: bytes) -> bytes:
    """``body`` as the kernel's sign-file appends a PKCS#7 signature to it."""
    info = bytes([0, 0, 2, 0, 0, 0, 0, 0]) + len(signature).to_bytes(4, "big")
    return body + signature + info + MODULE_SIGNATURE_MAGIC


def test_a_signed_module_loses_exactly_its_signature() -> None:
    body = b"\x7fELF" + bytes(range(256)) * 40
    assert unsigned_module(_signed(body, b"\x30\x82" + b"s" * 500), "ext4") == body


def test_an_unsigned_module_is_kept_as_it_is() -> None:
    body = b"\x7fELF" + b"\0depends=\0" + b"x" * 1000
    assert unsigned_module(body, "crc16") == body


@pytest.mark.parametrize("size", [10_000, 2**32 - 1])
def test_a_trailer_naming_more_signature_than_the_file_is_refused(size: int) -> None:
    broken = b"\x7fELF" + b"x" * 100 + bytes(8) + size.to_bytes(4, "big") + MODULE_SIGNATURE_MAGIC
    with pytest.raises(ImageBuildError, match=r"kernel module virtio_blk: .*signature"):
        unsigned_module(broken, "virtio_blk")


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox-static is not installed")
def test_the_initramfs_holds_every_module_unsigned_in_load_order(tmp_path: Path) -> None:
    """modules.order: a line per group of modules that depend on one another (the groups load
    at once), each in dependency order; every module exactly once."""
    kernel = tmp_path / "kernel"
    (kernel / "modules").mkdir(parents=True)
    # each "module" carries its modinfo depends= field: ext4 needs jbd2 (which needs crc16 here),
    # mbcache; the virtio drivers need virtio_ring and virtio
    depends = {
        "ext4": "jbd2,mbcache",
        "jbd2": "crc16",
        "virtio_blk": "virtio_ring,virtio",
        "virtio_console": "virtio,virtio_ring",
        "virtio": "virtio_ring",
    }
    bodies = {}
    for name in INITRAMFS_MODULES:
        bodies[name] = b"\x7fELF" + f"\0depends={depends.get(name, '')}\0".encode() + name.encode()
        (kernel / "modules" / f"{name}.ko").write_bytes(_signed(bodies[name], b"sig" * 100))
    target = tmp_path / "initrd.img"
    initramfs(kernel, tmp_path / "work", target)

    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    subprocess.run(
        ["busybox", "cpio", "-i", "-d"],
        input=gzip.decompress(target.read_bytes()),
        cwd=unpacked,
        check=True,
        capture_output=True,
    )
    for name, body in bodies.items():
        assert (unpacked / "modules" / f"{name}.ko").read_bytes() == body, name
    groups = [line.split() for line in (unpacked / "modules.order").read_text().splitlines()]
    assert sorted(name for group in groups for name in group) == sorted(INITRAMFS_MODULES)
    group_of = {name: group for group in groups for name in group}
    assert group_of["ext4"][-1] == "ext4"
    assert sorted(group_of["ext4"]) == ["crc16", "ext4", "jbd2", "mbcache"]
    assert group_of["crc16"].index("crc16") < group_of["jbd2"].index("jbd2")
    virtio = group_of["virtio_blk"]
    assert virtio == group_of["virtio_console"]
    assert virtio.index("virtio_ring") < virtio.index("virtio") < virtio.index("virtio_blk")
    assert ["crc32c_generic"] in groups  # needed by nothing here, needing nothing: alone
