"""``cubicle``: manage sandboxes from the shell (also ``python -m cubicle.orchestrator.cli``).

Exit codes: 0 ok; 1 a cubicle error (message on stderr, then ``hint:`` with the fix);
2 bad usage (argparse); 3 engine unavailable; 4 image missing; 5 sandbox not found;
130/143 interrupted by SIGINT/SIGTERM (sandboxes being created are removed first).

Sandbox ids carry their backend (``dk-…`` Docker, ``vm-…`` VM), so commands taking an id need
no ``--backend``. Docker commands take ``--engine URL`` (a remote engine over ``tcp://`` with TLS
or ``ssh://``; :mod:`cubicle.orchestrator.providers.docker.engine`); a sandbox id created on this
host leads to its engine without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

from cubicle.drivers.terminal_text import terminal_safe
from cubicle.orchestrator import files_cli, run_task
from cubicle.orchestrator.drill import cli as drill_cli
from cubicle.orchestrator.errors import (
    ConfigError,
    EngineUnavailable,
    ImageMissing,
    SandboxNotFound,
)
from cubicle.orchestrator.eval import cli as eval_cli
from cubicle.orchestrator.mcp import cli as mcp_cli
from cubicle.orchestrator.origin_answers import (
    register_ask,
    with_ask_timeout,
)
from cubicle.orchestrator.pool import admin
from cubicle.orchestrator.pool import cli as pool_cli
from cubicle.orchestrator.provider import Provider, SandboxSpec, default_cpus
from cubicle.orchestrator.providers import DOCKER_ENGINE_ENV, PROVIDERS, get_provider
from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
from cubicle.orchestrator.serve import cli as serve_cli
from cubicle.orchestrator.shape_options import (
    add_internal_networks_argument,
    add_shape_options,
    with_internal_networks,
)
from cubicle.orchestrator.view import cli as view_cli
from cubicle_guest.errors import CubicleError
from cubicle_guest.protocol import MAX_EXEC_OUTPUT_BYTES

__all__ = ["build_parser", "main"]

EXIT_CODES: dict[type[CubicleError], int] = {
    EngineUnavailable: 3,
    ImageMissing: 4,
    SandboxNotFound: 5,
}

Command = Callable[[argparse.Namespace], int]


def _out(text: str) -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _available_providers() -> list[Provider]:
    providers = []
    for name in PROVIDERS:
        with contextlib.suppress(ConfigError):
            providers.append(get_provider(name))
    return providers


# --------------------------------------------------------------------------- commands


def cmd_doctor(args: argparse.Namespace) -> int:
    all_ok = True
    for name in PROVIDERS:
        try:
            provider = get_provider(name)
        except ConfigError as exc:
            _out(f"[--] {name}: not available ({exc})")
            continue
        for check in provider.doctor():
            mark = "ok" if check.ok else "!!"
            all_ok &= check.ok or name != args.backend
            _out(
                f"[{mark}] {name} {check.name}: {check.detail}"
                + (f"  -> fix: {check.fix}" if check.fix else "")
            )
    return 0 if all_ok else 1


def cmd_image_build(args: argparse.Namespace) -> int:
    provider = get_provider(args.backend)
    ref = provider.build_image(progress=_out, force=args.force)
    _out(ref)
    return 0


def cmd_image_push(args: argparse.Namespace) -> int:
    provider = get_provider("docker")
    push = getattr(provider, "push_image", None)
    if push is None:
        raise ConfigError("this checkout's Docker backend cannot push images")
    _out(push(progress=_out))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    network = with_ask_timeout(args.network, args.ask_timeout)
    network = with_internal_networks(network, args.allow_internal)
    spec = SandboxSpec(
        screen=args.size,
        network=network,
        ttl_s=args.ttl,
        detached=True,
        cpus=default_cpus() if args.cpus is None else args.cpus,
    )
    with teardown_on_signals():
        sandbox = Sandbox.create(
            args.backend, spec=spec, ready_timeout_s=args.ready_timeout, progress=_err
        )
    if args.json:
        _out(json.dumps(_info_json(sandbox.info)))
    else:
        _out(sandbox.id)
    return 0


def _info_json(info: Any) -> dict[str, Any]:
    data = asdict(info)
    data["screen"] = f"{info.screen[0]}x{info.screen[1]}"
    return data


def cmd_ls(args: argparse.Namespace) -> int:
    rows = []
    for provider in _available_providers():
        try:
            rows.extend(provider.list())
        except EngineUnavailable as exc:
            _err(f"{provider.name}: skipped ({exc})")
    if args.json:
        _out(json.dumps([_info_json(info) for info in rows]))
        return 0
    now = time.time()
    _out(f"{'ID':<16}{'BACKEND':<8}{'STATE':<10}{'SCREEN':<11}{'EXPIRES':<10}{'OWNER':<12}NETWORK")
    for info in rows:
        owner = str(info.owner_pid) if info.ownership == "owned" else info.ownership
        left = f"{max(0, info.expires_at - now) / 60:.0f}m"
        screen = f"{info.screen[0]}x{info.screen[1]}"
        _out(
            f"{info.id:<16}{info.provider:<8}{info.state:<10}{screen:<11}{left:<10}{owner:<12}{info.network}"
        )
    return 0


def cmd_screenshot(args: argparse.Namespace) -> int:
    sandbox = Sandbox.attach(args.id)
    result, image = sandbox.screenshot()
    Path(args.output).write_bytes(image)
    _err(
        f"{args.output}: {result.get('width')}x{result.get('height')} {result.get('format', 'png')}"
    )
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigError("exec needs a command: cubicle exec ID -- ARGV...")
    sandbox = Sandbox.attach(args.id)
    result = sandbox.exec(argv, timeout=args.timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    for stream, cut in (("stdout", result.stdout_truncated), ("stderr", result.stderr_truncated)):
        if cut:
            _err(f"cubicle: {argv[0]}'s {stream} was cut at {MAX_EXEC_OUTPUT_BYTES} bytes as sent")
    if result.timed_out:
        _err(f"cubicle: {argv[0]} timed out after {args.timeout} s")
        return 124
    return result.exit_code if result.exit_code is not None else 1


def cmd_logs(args: argparse.Namespace) -> int:
    """The guest wrote these logs: control characters are shown, not sent to the terminal."""
    sandbox = Sandbox.attach(args.id)
    _out(terminal_safe(sandbox.logs(tail=args.tail).rstrip("\n")))
    text = sandbox.provider.egress_log(sandbox.id)
    if text:
        _out("--- egress proxy ---")
        _out(terminal_safe(text.rstrip("\n")))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    if args.all == bool(args.ids):
        raise ConfigError("down takes sandbox ids or --all (not both, not neither)")
    if args.all:
        for provider in _available_providers():
            try:
                for info in provider.list():
                    provider.destroy(info.id)
                    _out(info.id)
            except EngineUnavailable as exc:
                _err(f"{provider.name}: skipped ({exc})")
        return 0
    for sandbox_id in args.ids:
        Sandbox.attach(sandbox_id).destroy()
        _out(sandbox_id)
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    for key in admin.gc():
        _err(f"pool {key}: expired")
    for provider in _available_providers():
        try:
            for sandbox_id in provider.gc():
                _out(sandbox_id)
        except EngineUnavailable as exc:
            _err(f"{provider.name}: skipped ({exc})")
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cubicle", description="Disposable desktops for computer-use agents"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    backends = sorted(PROVIDERS)
    # the Docker engine (docs: cubicle/orchestrator/providers/docker/engine.py), on every command
    # using it
    engine = argparse.ArgumentParser(add_help=False)
    engine.add_argument(
        "--engine",
        metavar="URL",
        help=f"Docker engine: unix://PATH, tcp://HOST:PORT (TLS), ssh://[USER@]HOST "
        f"(default: ${DOCKER_ENGINE_ENV}, else the engine each sandbox id was created on, "
        "else $DOCKER_HOST)",
    )

    p = sub.add_parser(
        "doctor",
        help="check engines, images and accelerators (one line each, with the fix)",
        parents=[engine],
    )
    p.add_argument(
        "--backend",
        choices=backends,
        default="docker",
        help="backend whose failures fail the command",
    )
    p.set_defaults(func=cmd_doctor)

    image = sub.add_parser("image", help="guest images")
    image_sub = image.add_subparsers(dest="image_command", required=True, metavar="ACTION")
    p = image_sub.add_parser(
        "build", help="build the guest image (no-op when up to date)", parents=[engine]
    )
    p.add_argument("--backend", choices=backends, default="docker")
    p.add_argument("--force", action="store_true", help="rebuild without the cache")
    p.set_defaults(func=cmd_image_build)
    p = image_sub.add_parser(
        "push",
        help="send the guest image from the local Docker engine to --engine over the engines' "
        "APIs (no registry)",
        parents=[engine],
    )
    p.set_defaults(func=cmd_image_push)

    p = sub.add_parser(
        "up",
        help="start a sandbox and print its id (it runs until down or its ttl)",
        parents=[engine],
    )
    add_shape_options(p)
    add_internal_networks_argument(p)
    p.add_argument(
        "--ttl", type=float, default=3600.0, help="seconds until gc may remove it (default 3600)"
    )
    p.add_argument(
        "--cpus",
        type=float,
        default=None,
        help="CPU limit in cores (default: $CUBICLE_CPUS, else 1)",
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=90.0,
        help="seconds to wait for the agent (default 90)",
    )
    p.add_argument("--json", action="store_true", help="print the sandbox as JSON")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser(
        "ls", help="list sandboxes of every available backend and known engine", parents=[engine]
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("screenshot", help="save a screenshot (PNG)", parents=[engine])
    p.add_argument("id")
    p.add_argument("-o", "--output", required=True, help="file to write")
    p.set_defaults(func=cmd_screenshot)

    p = sub.add_parser(
        "exec",
        help="run a command in the guest as the desktop user: exec ID -- ARGV...",
        parents=[engine],
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    p.add_argument("id")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser(
        "logs", help="the guest's log (and the egress proxy's decisions)", parents=[engine]
    )
    p.add_argument("id")
    p.add_argument("--tail", type=int, default=200)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("down", help="remove sandboxes", parents=[engine])
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="remove every cubicle sandbox")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser(
        "gc",
        help="remove sandboxes whose owner process is gone (or, once ready, whose ttl passed)",
        parents=[engine],
    )
    p.set_defaults(func=cmd_gc)

    register_ask(sub)
    _register_plugins(sub)
    return parser


SUBCOMMAND_MODULES: Final = (
    files_cli,
    drill_cli,
    eval_cli,
    run_task,
    view_cli,
    pool_cli,
    serve_cli,
    mcp_cli,
)
"""The modules whose ``register(sub)`` adds their subcommands — ``cp``, ``clip``, ``drill``,
``eval``, ``run``, ``view``, ``pool``, ``serve``, ``mcp`` — in ``cubicle --help``'s order."""


def _register_plugins(sub: Any) -> None:
    for module in SUBCOMMAND_MODULES:
        module.register(sub)


@contextlib.contextmanager
def _engine_override(url: str | None) -> Iterator[None]:
    """``--engine URL``: ``CUBICLE_DOCKER_HOST`` for the duration of one command."""
    if not url:
        yield
        return
    previous = os.environ.get(DOCKER_ENGINE_ENV)
    os.environ[DOCKER_ENGINE_ENV] = url
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DOCKER_ENGINE_ENV, None)
        else:
            os.environ[DOCKER_ENGINE_ENV] = previous


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # warnings (e.g. gc and ls skipping an object whose labels do not parse) go to stderr
    logging.basicConfig(level=logging.WARNING, format="cubicle: warning: %(message)s")
    func: Command = args.func
    try:
        with _engine_override(getattr(args, "engine", None)):
            return func(args)
    except KeyboardInterrupt:
        _err("cubicle: interrupted")
        return 130
    except CubicleError as exc:
        _err(f"cubicle: {exc}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        for cls, code in EXIT_CODES.items():
            if isinstance(exc, cls):
                return code
        return 1


if __name__ == "__main__":
    sys.exit(main())
