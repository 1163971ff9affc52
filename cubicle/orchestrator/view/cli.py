"""``cubicle view ID [--json] [--takeover | --release] [--open]``: the live view of a sandbox.

Prints a one-time URL of the sandbox's view server on 127.0.0.1 (started when none runs; it
stops with the sandbox: ``down``, ``gc``, or the sandbox disappearing). The token is in the URL's
fragment, spent when the page opens it; run the command again for another link. ``--takeover``
hands control to a person (the agent loop waits), ``--release`` gives it back.
"""

from __future__ import annotations

import argparse
import json
import webbrowser
from typing import Any

from cubicle.orchestrator.view.control import open_view, set_mode

__all__ = ["cmd_view", "register"]


def cmd_view(args: argparse.Namespace) -> int:
    if args.release:
        state = set_mode(args.id, "view")
        print(json.dumps({"mode": state.mode}) if args.json else "control given back to the agent")
        return 0
    link = open_view(args.id, mode="takeover" if args.takeover else None)
    if args.json:
        print(json.dumps(link.as_json()), flush=True)
    else:
        print(link.url, flush=True)
        if link.mode == "takeover":
            print("you have control: the agent waits until: cubicle view --release " + args.id)
    if args.open and not webbrowser.open(link.url):
        print("cubicle: no browser to open here; open the URL above yourself")
    return 0


def register(sub: Any) -> None:
    """Add ``view`` to the ``cubicle`` subcommand parser."""
    p = sub.add_parser(
        "view",
        help="watch a sandbox's desktop in a browser tab (view-only; --takeover to control it)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("id", help="sandbox id")
    p.add_argument("--json", action="store_true", help='print {"url": ..., "mode": ...}')
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--takeover", action="store_true", help="take control: the agent loop waits until released"
    )
    group.add_argument(
        "--release", action="store_true", help="give control back to the agent (no new link)"
    )
    p.add_argument("--open", action="store_true", help="open the link in a browser")
    p.set_defaults(func=cmd_view)
