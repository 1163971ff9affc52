"""``cubicle cp`` and ``cubicle clip``: files and the clipboard of a sandbox from the shell.

``cubicle cp LOCAL ID:PATH`` and ``cubicle cp ID:PATH LOCAL`` copy a file or folder in or out,
as ``docker cp`` does (:mod:`cubicle.orchestrator.file_transfer`). ``cubicle clip ID`` prints
the clipboard's text exactly, and nothing else, on stdout; ``cubicle clip ID --set TEXT`` sets
it (``--primary``: the PRIMARY selection).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Final, Literal

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.sandbox import Sandbox

__all__ = ["cmd_clip", "cmd_cp", "register", "split_remote"]

_REMOTE: Final = re.compile(r"^((?:dk|vm)-[A-Za-z0-9_.-]+):(.*)$")
"""``ID:PATH`` where ID is a sandbox id (its backend's prefix, ``dk-`` or ``vm-``)."""


def split_remote(operand: str) -> tuple[str, str] | None:
    """``(id, path)`` of an ``ID:PATH`` operand; ``None`` for a local path."""
    match = _REMOTE.match(operand)
    if match is None:
        return None
    return match.group(1), match.group(2)


def cmd_cp(args: argparse.Namespace) -> int:
    source, destination = split_remote(args.source), split_remote(args.destination)
    if (source is None) == (destination is None):
        raise ConfigError(
            "cp copies between the host and one sandbox: cubicle cp LOCAL ID:PATH, or "
            f"cubicle cp ID:PATH LOCAL (got {args.source!r} {args.destination!r})"
        )
    if source is not None:
        sandbox_id, guest_path = source
        if not guest_path:
            raise ConfigError(f"cp: {args.source!r} names no guest path")
        Sandbox.attach(sandbox_id).download(guest_path, args.destination)
    else:
        assert destination is not None
        sandbox_id, guest_path = destination
        Sandbox.attach(sandbox_id).upload(args.source, guest_path or ".")
    return 0


def cmd_clip(args: argparse.Namespace) -> int:
    selection: Literal["clipboard", "primary"] = "primary" if args.primary else "clipboard"
    sandbox = Sandbox.attach(args.id)
    if args.set is not None:
        sandbox.set_clipboard(args.set, selection)
        return 0
    text = sandbox.get_clipboard(selection)
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()
    return 0


def register(sub: Any) -> None:
    """Add ``cp`` and ``clip`` to the ``cubicle`` parser's subcommands."""
    p = sub.add_parser(
        "cp",
        help="copy a file or folder in or out: cp LOCAL ID:PATH, cp ID:PATH LOCAL",
        description="Copy like docker cp: an existing destination folder receives the copy "
        "under its source's name. Modes and mtimes are kept; a guest path is the desktop "
        "user's (relative: from its home).",
    )
    p.add_argument("source")
    p.add_argument("destination")
    p.set_defaults(func=cmd_cp)

    p = sub.add_parser(
        "clip", help="print the guest's clipboard text exactly, or set it with --set TEXT"
    )
    p.add_argument("id")
    p.add_argument("--set", metavar="TEXT", help="make the clipboard hold TEXT")
    p.add_argument("--primary", action="store_true", help="the PRIMARY selection instead")
    p.set_defaults(func=cmd_clip)
