"""Where the VM backend's host programs are, and how to install the missing ones.

An unprivileged login's ``PATH`` has no ``/usr/sbin`` or ``/sbin`` (where Debian puts
``mkfs.ext4``, ``iptables`` and ``libvirtd``), and Homebrew installs some formulas keg-only
(``e2fsprogs``: only under ``<prefix>/opt/e2fsprogs/sbin``, never on ``PATH``). So a tool is
looked up, in this order (:func:`search_dirs`):

1. every folder of ``PATH``;
2. ``/usr/local/sbin``, ``/usr/sbin``, ``/sbin``, ``/usr/local/bin``, ``/usr/bin``, ``/bin``;
3. for each Homebrew prefix (``$HOMEBREW_PREFIX``, ``/opt/homebrew``, ``/usr/local``,
   ``/home/linuxbrew/.linuxbrew``): ``<prefix>/opt/<formula>/sbin`` and ``…/bin`` of the
   tool's formula (its keg), then ``<prefix>/sbin`` and ``<prefix>/bin``.

The first regular, executable file wins. :func:`find_tool` answers with its path (or None);
:func:`require_tool` raises naming the tool and its install line for Debian and for Homebrew
(:func:`install_line`); :func:`tool_checks` is ``cubicle doctor``'s line per tool: where it was
found, or the install line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.provider import DoctorCheck

__all__ = [
    "HOMEBREW_PREFIXES",
    "SYSTEM_DIRS",
    "TOOLS",
    "HostTool",
    "find_tool",
    "install_line",
    "require_tool",
    "search_dirs",
    "tool_checks",
]

SYSTEM_DIRS: Final = (
    Path("/usr/local/sbin"),
    Path("/usr/sbin"),
    Path("/sbin"),
    Path("/usr/local/bin"),
    Path("/usr/bin"),
    Path("/bin"),
)
"""Searched after ``PATH``: Debian's sbin folders are missing from an unprivileged ``PATH``."""
HOMEBREW_PREFIXES: Final = (
    Path("/opt/homebrew"),  # Apple silicon
    Path("/usr/local"),  # Intel Macs
    Path("/home/linuxbrew/.linuxbrew"),  # Homebrew on Linux
)


@dataclass(frozen=True)
class HostTool:
    """A host program: its Debian package and Homebrew formula (None: not packaged there)."""

    name: str
    debian: str | None
    homebrew: str | None
    purpose: str


TOOLS: Final[Mapping[str, HostTool]] = {
    tool.name: tool
    for tool in (
        HostTool("qemu-img", "qemu-utils", "qemu", "per-sandbox disk overlays"),
        HostTool("qemu-system-x86_64", "qemu-system-x86", "qemu", "the x86-64 hypervisor"),
        HostTool("qemu-system-aarch64", "qemu-system-arm", "qemu", "the arm64 hypervisor"),
        HostTool("libvirtd", "libvirt-daemon-system", "libvirt", "the libvirt daemon"),
        HostTool("mkfs.ext4", "e2fsprogs", "e2fsprogs", "the image build's root file system"),
        HostTool("iptables", "iptables", None, "the bridge path's host firewall rules"),
        HostTool("ip6tables", "iptables", None, "the bridge path's host firewall rules"),
    )
}
"""The tools cubicle knows the packages of (others get a generic install line)."""


def search_dirs(name: str, env: Mapping[str, str] | None = None) -> list[Path]:
    """The folders :func:`find_tool` searches for ``name``, in order, without duplicates."""
    env = os.environ if env is None else env
    dirs = [Path(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    dirs += SYSTEM_DIRS
    named = env.get("HOMEBREW_PREFIX", "")
    tool = TOOLS.get(name)
    for prefix in ([Path(named)] if named else []) + list(HOMEBREW_PREFIXES):
        if tool is not None and tool.homebrew is not None:
            keg = prefix / "opt" / tool.homebrew  # keg-only formulas are only here
            dirs += (keg / "sbin", keg / "bin")
        dirs += (prefix / "sbin", prefix / "bin")
    unique: list[Path] = []
    for folder in dirs:
        if folder.is_absolute() and folder not in unique:  # a relative PATH entry is ignored
            unique.append(folder)
    return unique


def find_tool(name: str, env: Mapping[str, str] | None = None) -> Path | None:
    """The first executable regular file called ``name`` in the search order of this module's
    docstring; None when there is none. ``name`` must be a bare program name."""
    if not name or "/" in name:
        raise ValueError(f"find_tool wants a bare program name, got {name!r}")
    for folder in search_dirs(name, env):
        candidate = folder / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def install_line(name: str) -> str:
    """How to install ``name``: ``Debian: apt-get install P; Homebrew: brew install F`` (a side
    without a package says so)."""
    tool = TOOLS.get(name)
    if tool is None:
        return f"install {name} with your package manager"
    debian = f"apt-get install {tool.debian}" if tool.debian else "not packaged"
    homebrew = f"brew install {tool.homebrew}" if tool.homebrew else "not available (Linux only)"
    return f"Debian: {debian}; Homebrew: {homebrew}"


def require_tool(name: str, env: Mapping[str, str] | None = None, *, needed_for: str = "") -> str:
    """:func:`find_tool`'s path as a string.

    :raises ProviderError: ``name`` was found nowhere; the hint is its install line.
    """
    found = find_tool(name, env)
    if found is None:
        for_what = f" ({needed_for})" if needed_for else ""
        raise ProviderError(
            f"{name} is not installed{for_what}: not on PATH, not in /usr/sbin or /sbin, "
            "not in a Homebrew prefix",
            hint=install_line(name),
        )
    return str(found)


def tool_checks(names: Iterable[str], env: Mapping[str, str] | None = None) -> list[DoctorCheck]:
    """One doctor line per tool: ``found at PATH`` or not installed with :func:`install_line`."""
    checks = []
    for name in names:
        found = find_tool(name, env)
        purpose = TOOLS[name].purpose if name in TOOLS else ""
        suffix = f" ({purpose})" if purpose else ""
        if found is not None:
            checks.append(DoctorCheck(name, True, f"found at {found}{suffix}"))
        else:
            checks.append(
                DoctorCheck(name, False, f"{name} is not installed{suffix}", install_line(name))
            )
    return checks
