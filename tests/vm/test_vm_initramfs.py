"""The VM initramfs (orchestrator/providers/vm/build.py): Debian's modules go in without their
appended signatures (the guest kernel would hash and RSA-check each one as it loads it: ~0.4 s
of a cold boot under TCG), in dependency order, in a cpio the kernel unpacks."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import ImageBuildError
from orchestrator.providers.vm.build import (
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
    kernel = tmp_path / "kernel"
    (kernel / "modules").mkdir(parents=True)
    # ext4 depends on jbd2 and mbcache here; each "module" carries its modinfo depends= field
    depends = {"ext4": "jbd2,mbcache,crc16"}
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
    order = (unpacked / "modules.order").read_text().split()
    assert sorted(order) == sorted(INITRAMFS_MODULES)
    for dependency in ("jbd2", "mbcache", "crc16"):
        assert order.index(dependency) < order.index("ext4")
