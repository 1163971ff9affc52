"""``cubicle pool fill N | ls | drain``: warm pools of ready sandboxes
(:mod:`cubicle.orchestrator.pool`).

``pool fill N`` starts N sandboxes of one shape and parks them; while the pool exists,
``cubicle up`` and ``Sandbox.create()`` of that shape (same backend, image, size, network and
limits) claim one in milliseconds, and a background refiller tops the pool up. Members expire
with the pool (``--ttl``); ``gc`` removes them then. ``pool drain`` removes a pool's unclaimed
members (all pools without a key); claimed sandboxes stay their claimers'.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.pool import admin, fill, registry
from cubicle.orchestrator.provider import SandboxSpec, default_cpus
from cubicle.orchestrator.shape_options import add_shape_options

__all__ = ["register"]


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def cmd_fill(args: argparse.Namespace) -> int:
    if args.network.mode == "ask" or args.ask_timeout is not None:
        raise ConfigError(
            "pool fill: ask: networks are not pooled (a member's origin questions and its ask "
            "timeout belong to the process that claims it)",
            hint="start ask: sandboxes with: cubicle up --network ask:...",
        )
    spec = SandboxSpec(
        screen=args.size,
        network=args.network,
        ttl_s=args.ttl,
        cpus=default_cpus() if args.cpus is None else args.cpus,
    )
    record, made = admin.start(
        args.backend,
        spec,
        args.count,
        progress=_err,
        parallel=args.parallel,
        ready_timeout_s=args.ready_timeout,
    )
    if args.json:
        print(json.dumps({**record.to_json(), "made": made}), flush=True)
    else:
        print(record.key, flush=True)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    rows = admin.status()
    if args.json:
        print(
            json.dumps(
                [
                    {
                        **row.record.to_json(),
                        "ready": row.ready,
                        "filling": row.filling,
                        "refillers": row.refillers,
                    }
                    for row in rows
                ]
            ),
            flush=True,
        )
        return 0
    now = time.time()
    print(
        f"{'POOL':<14}{'BACKEND':<8}{'READY':<8}{'SCREEN':<11}{'EXPIRES':<9}{'FILLING':<9}NETWORK"
    )
    for row in rows:
        shape = row.record.shape
        left = f"{max(0.0, row.record.expires_at - now) / 60:.0f}m"
        print(
            f"{row.record.key:<14}{shape.backend:<8}{f'{row.ready}/{row.record.size}':<8}"
            f"{f'{shape.screen[0]}x{shape.screen[1]}':<11}{left:<9}"
            f"{'yes' if row.filling else 'no':<9}{shape.network}"
        )
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    keys = args.keys or [record.key for record in registry.records()]
    for key in keys:
        removed = admin.drain(key)
        print(f"{key}: {len(removed)} removed", flush=True)
    return 0


def register(sub: Any) -> None:
    """Add ``pool`` to the ``cubicle`` subcommand parser."""

    pool = sub.add_parser(
        "pool",
        help="warm pools: ready sandboxes claimed by up / Sandbox.create in milliseconds",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    pool_sub = pool.add_subparsers(dest="pool_command", required=True, metavar="ACTION")

    p = pool_sub.add_parser("fill", help="start N members of one shape and park them")
    p.add_argument("count", type=int, metavar="N", help="ready members the pool keeps")
    add_shape_options(p)
    p.add_argument("--cpus", type=float, default=None, help="CPU limit in cores (default 1)")
    p.add_argument(
        "--ttl",
        type=float,
        default=3600.0,
        help="seconds the pool and its members live (default 3600)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=fill.DEFAULT_PARALLEL,
        help=f"members started at once (default {fill.DEFAULT_PARALLEL})",
    )
    p.add_argument("--ready-timeout", type=float, default=90.0, help="seconds per member")
    p.add_argument("--json", action="store_true", help="print the pool as JSON")
    p.set_defaults(func=cmd_fill)

    p = pool_sub.add_parser("ls", help="list pools: ready members, expiry, fillers")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ls)

    p = pool_sub.add_parser("drain", help="remove pools and their unclaimed members")
    p.add_argument("keys", nargs="*", metavar="POOL", help="pool keys (default: every pool)")
    p.set_defaults(func=cmd_drain)
