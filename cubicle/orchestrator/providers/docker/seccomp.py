"""The guest container's seccomp profile: Docker's default plus what Chromium's sandbox needs.

Chromium's Linux sandbox has two layers: a *namespace sandbox* (each renderer, GPU and utility
process is started in new user, PID and network namespaces and chroots into an empty directory,
so it sees no files, no other processes and no network) and a *seccomp-bpf* filter of its own.
Docker's default profile refuses the first layer to an unprivileged container: it allows
``clone`` only without namespace flags, refuses ``unshare`` and ``chroot`` (they are granted
only with CAP_SYS_ADMIN / CAP_SYS_CHROOT, which the guest has not), so Chromium stops with
"No usable sandbox!" unless its sandbox is switched off, which cubicle never does.

:func:`guest_profile` is Docker's default profile, verbatim from moby (``profiles/seccomp/
default.json`` at :data:`MOBY_VERSION`, shipped as ``seccomp_default.json``), followed by
:data:`CHROMIUM_SANDBOX_RULES`: the smallest additions that let the namespace sandbox start, each
justified below. The container still has no capabilities and ``no-new-privileges``. The
trade-off (docs/security.md): processes in the guest may create user namespaces, and inside
them PID and network namespaces; a kernel bug reachable only from inside a user namespace is
then reachable from the guest. Mount, UTS, IPC and cgroup namespaces stay refused.

To move to a newer Docker's default, replace the JSON file with that version's
``profiles/seccomp/default.json`` and update :data:`MOBY_VERSION`; the additions do not change.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Final

__all__ = ["CHROMIUM_SANDBOX_RULES", "MOBY_VERSION", "default_profile", "guest_profile"]

MOBY_VERSION: Final = "v20.10.24"
"""The moby release whose default profile ``seccomp_default.json`` is."""

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWCGROUP: Final = 0x02000000
CLONE_NEWUTS: Final = 0x04000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000

REFUSED_NAMESPACES: Final = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC
"""Namespace flags that stay refused: ``clone``/``unshare`` pass only when none of these is set
(Docker's default refuses all seven namespace flags; we let user, PID and network through)."""


def _flags_rule(name: str, comment: str) -> dict[str, Any]:
    """Allow syscall ``name`` when its first argument (the flags) has no refused namespace bit.

    ``SCMP_CMP_MASKED_EQ`` compares ``arg & value`` with ``valueTwo`` (moby's encoding).
    """
    return {
        "names": [name],
        "action": "SCMP_ACT_ALLOW",
        "args": [
            {"index": 0, "value": REFUSED_NAMESPACES, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}
        ],
        "comment": comment,
        "includes": {},
        "excludes": {"arches": ["s390", "s390x"]},  # s390 swaps clone's first two arguments
    }


CHROMIUM_SANDBOX_RULES: Final[tuple[dict[str, Any], ...]] = (
    # Chromium's zygote starts every sandboxed child with clone(CLONE_NEWUSER | CLONE_NEWPID |
    # CLONE_NEWNET) (sandbox/linux/services/namespace_sandbox.cc), and first probes with a bare
    # clone(CLONE_NEWUSER) that user namespaces work. The kernel lets an unprivileged process
    # make a new user namespace, and PID/network namespaces owned by it; it refuses every other
    # namespace without CAP_SYS_ADMIN in the caller's namespace. Mount, UTS, IPC and cgroup
    # namespaces stay refused here whatever the namespace.
    _flags_rule(
        "clone",
        "cubicle: Chromium's namespace sandbox (new user, PID and network namespaces)",
    ),
    # The same flags through unshare: Chromium's credentials code moves a process into a new
    # user namespace with unshare(CLONE_NEWUSER) (sandbox/linux/services/credentials.cc).
    _flags_rule(
        "unshare",
        "cubicle: Chromium's namespace sandbox (unshare into a new user namespace)",
    ),
    # Chromium then drops file system access: in its new user namespace it holds CAP_SYS_CHROOT
    # over that namespace only, and chroots into an empty directory (/proc/self/fdinfo, gone
    # once the helper exits). Docker allows chroot only with CAP_SYS_CHROOT in the container,
    # which the guest has not; the kernel still refuses chroot to any process of the guest that
    # has not made its own user namespace.
    {
        "names": ["chroot"],
        "action": "SCMP_ACT_ALLOW",
        "args": [],
        "comment": "cubicle: Chromium's namespace sandbox (chroot into an empty directory)",
        "includes": {},
        "excludes": {},
    },
)
"""The rules added to Docker's default profile (each with a ``comment`` naming why)."""


def default_profile() -> dict[str, Any]:
    """Docker's default seccomp profile (moby :data:`MOBY_VERSION`), as shipped (a fresh copy)."""
    text = resources.files(__package__).joinpath("seccomp_default.json").read_text()
    profile: dict[str, Any] = json.loads(text)
    return profile


@cache
def guest_profile() -> str:
    """The guest container's profile as JSON text (what ``security_opt`` ``seccomp=`` takes):
    :func:`default_profile` with :data:`CHROMIUM_SANDBOX_RULES` appended."""
    profile = default_profile()
    profile["syscalls"] = [*profile["syscalls"], *CHROMIUM_SANDBOX_RULES]
    return json.dumps(profile, separators=(",", ":"))
