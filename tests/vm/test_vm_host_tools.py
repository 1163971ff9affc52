"""Host programs are found where an unprivileged login's PATH does not look (/usr/sbin, /sbin,
Homebrew kegs), and doctor says where each one is, or how to install it on Debian and Homebrew.

Real files in temporary folders stand in for the system folders and Homebrew prefixes; no
lookup is mocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.providers.vm import host_tools
from cubicle.orchestrator.providers.vm.host_tools import (
    find_tool,
    install_line,
    require_tool,
    search_dirs,
    tool_checks,
)


def _program(folder: Path, name: str, mode: int = 0o755) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


@pytest.fixture
def no_system_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The system folders and default Homebrew prefixes replaced by empty folders of the test."""
    system = tmp_path / "system"
    monkeypatch.setattr(host_tools, "SYSTEM_DIRS", (system / "usr-sbin", system / "sbin"))
    monkeypatch.setattr(host_tools, "HOMEBREW_PREFIXES", (tmp_path / "opt-homebrew",))
    return system


def test_a_tool_in_sbin_is_found_without_sbin_on_path(no_system_dirs: Path, tmp_path: Path) -> None:
    mkfs = _program(no_system_dirs / "sbin", "mkfs.ext4")
    env = {"PATH": str(tmp_path / "bin")}  # an unprivileged login's PATH: no sbin
    assert find_tool("mkfs.ext4", env) == mkfs
    assert require_tool("mkfs.ext4", env) == str(mkfs)


def test_path_comes_first_and_non_executables_are_skipped(
    no_system_dirs: Path, tmp_path: Path
) -> None:
    _program(no_system_dirs / "usr-sbin", "qemu-img")
    on_path = _program(tmp_path / "bin", "qemu-img")
    _program(tmp_path / "first", "qemu-img", mode=0o644)  # not executable: skipped
    env = {"PATH": os.pathsep.join([str(tmp_path / "first"), str(tmp_path / "bin")])}
    assert find_tool("qemu-img", env) == on_path


def test_a_keg_only_homebrew_formula_is_found_in_its_keg(
    no_system_dirs: Path, tmp_path: Path
) -> None:
    keg = _program(tmp_path / "opt-homebrew" / "opt" / "e2fsprogs" / "sbin", "mkfs.ext4")
    assert find_tool("mkfs.ext4", {"PATH": ""}) == keg
    # HOMEBREW_PREFIX names another prefix; it is searched before the default ones
    other = _program(tmp_path / "brew" / "opt" / "e2fsprogs" / "sbin", "mkfs.ext4")
    env = {"PATH": "", "HOMEBREW_PREFIX": str(tmp_path / "brew")}
    assert find_tool("mkfs.ext4", env) == other
    dirs = search_dirs("mkfs.ext4", env)
    named, default = (
        p / "opt" / "e2fsprogs" / "sbin" for p in (tmp_path / "brew", tmp_path / "opt-homebrew")
    )
    assert dirs.index(named) < dirs.index(default)


def test_a_missing_tool_is_refused_with_both_install_lines(no_system_dirs: Path) -> None:
    with pytest.raises(ProviderError) as caught:
        require_tool("mkfs.ext4", {"PATH": ""}, needed_for="the image build")
    assert "mkfs.ext4 is not installed (the image build)" in str(caught.value)
    assert caught.value.hint == (
        "Debian: apt-get install e2fsprogs; Homebrew: brew install e2fsprogs"
    )
    assert install_line("iptables") == (
        "Debian: apt-get install iptables; Homebrew: not available (Linux only)"
    )


def test_doctor_lines_say_where_or_how_to_install(no_system_dirs: Path, tmp_path: Path) -> None:
    qemu_img = _program(no_system_dirs / "usr-sbin", "qemu-img")
    found, missing = tool_checks(["qemu-img", "qemu-system-aarch64"], {"PATH": ""})
    assert found.ok and found.detail == f"found at {qemu_img} (per-sandbox disk overlays)"
    assert not missing.ok
    assert missing.detail == "qemu-system-aarch64 is not installed (the arm64 hypervisor)"
    assert missing.fix == "Debian: apt-get install qemu-system-arm; Homebrew: brew install qemu"


def test_this_hosts_sbin_tools_are_found_with_a_bare_path() -> None:
    """On this Debian host, iptables lives in /usr/sbin: a bare PATH still finds it."""
    if not Path("/usr/sbin/iptables").exists():
        pytest.skip("no /usr/sbin/iptables on this host")
    assert find_tool("iptables", {"PATH": "/usr/bin:/bin"}) == Path("/usr/sbin/iptables")


def test_a_path_is_not_a_tool_name() -> None:
    with pytest.raises(ValueError, match="bare program name"):
        find_tool("/usr/sbin/iptables")
