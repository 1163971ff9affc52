"""A normal user's VM state: their own XDG cache folder, refused when another user could write it,
and root's image builds found in the shared folder only when no one but root can change them.
No guest boots here: every refusal happens before libvirt is asked anything."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ConfigError, ImageMissing
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import image as vm_image


def test_a_users_vm_home_is_their_xdg_cache_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """(The uid is the only thing set by hand: this checkout's Python is not one another user may
    run here.)"""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("CUBICLE_HOME", raising=False)
    monkeypatch.setenv("HOME", "/h")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert vm_image.vm_home() == Path("/x/cache/cubicle/vm")
    # unset or relative: ~/.cache, as the XDG base directory spec says
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    assert vm_image.vm_home() == Path("/h/.cache/cubicle/vm")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert vm_image.vm_home() == Path("/h/.cache/cubicle/vm")


def test_a_vm_home_another_user_can_write_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    home = tmp_path / "cache" / "cubicle" / "vm"
    home.mkdir(parents=True)
    (tmp_path / "cache").chmod(0o777)  # a parent another user can write
    provider = VmProvider(home=home, uri="test:///default")
    with pytest.raises(ConfigError, match=r"cache") as caught:
        provider.create(SandboxSpec())
    assert "writ" in str(caught.value)
    assert not (home / "run").exists()


def _built(home: Path, ref: str) -> Path:
    directory = home / "images" / ref
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({"ref": ref}))
    for path in (directory, *list(directory.parents)[:3]):
        path.chmod(0o755)
    return directory


def test_root_builds_in_the_shared_folder_are_used_only_when_only_root_can_change_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the shared folder must be root's")
    shared = tmp_path / "shared" / "vm"
    monkeypatch.setattr(vm_image, "SHARED_HOME", shared)
    ref = "0123456789abcdef"
    directory = _built(shared, ref)
    own = tmp_path / "user-home"
    found = vm_image.load_image(ref, own)
    assert found.directory == directory and found.base == directory / "base.qcow2"
    # the user's own build of the same ref wins
    mine = _built(own, ref)
    assert vm_image.load_image(ref, own).directory == mine
    # a shared build someone else could have changed is not used
    other = "fedcba9876543210"
    shared_other = _built(shared, other)
    shared_other.chmod(0o777)
    with pytest.raises(ImageMissing, match=other):
        vm_image.load_image(other, own)
    shared_other.chmod(0o755)
    os.chown(shared_other / "manifest.json", 65534, 65534)  # not root's
    with pytest.raises(ImageMissing, match=other):
        vm_image.load_image(other, own)


def test_an_image_folder_can_be_pinned_by_path_when_no_one_else_can_change_it(
    tmp_path: Path,
) -> None:
    directory = _built(tmp_path / "elsewhere", "00112233445566ff")
    image = vm_image.load_image(str(directory), tmp_path / "unused-home")
    assert (image.ref, image.directory) == ("00112233445566ff", directory)
    directory.chmod(0o777)
    with pytest.raises(ConfigError, match="refusing the VM image folder"):
        vm_image.load_image(str(directory), tmp_path / "unused-home")
