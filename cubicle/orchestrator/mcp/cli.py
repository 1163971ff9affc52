"""``cubicle mcp [--http [--port P] [--token-file PATH]] [--backend B] [--files DIR]``: serve
the desktop as MCP tools — on stdin/stdout by default (what an MCP client launches), or as
streamable HTTP on 127.0.0.1 with a bearer token (``CUBICLE_MCP_TOKEN``, or generated and
written to a file only the user can read; its path is printed on stderr). The sandboxes it
creates are removed when it stops. The upload and download tools read and write the files folder
alone (``--files DIR``, default ``$XDG_DATA_HOME/cubicle/mcp-files``, created 0700 at the first
use).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from cubicle.orchestrator.errors import ConfigError

__all__ = ["DEFAULT_PORT", "cmd_mcp", "default_token_file", "register"]

DEFAULT_PORT = 8378


def default_token_file(port: int) -> Path:
    """Where the HTTP server writes its token: ``$XDG_STATE_HOME/cubicle/mcp/PORT.token``
    (``~/.local/state`` without the variable)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cubicle" / "mcp" / f"{port}.token"


def cmd_mcp(args: argparse.Namespace) -> int:
    # the server and the mcp package load only for this command (every other one starts faster)
    from cubicle.orchestrator.mcp.auth import resolve_token  # noqa: PLC0415
    from cubicle.orchestrator.mcp.desktops import Desktops  # noqa: PLC0415
    from cubicle.orchestrator.mcp.files import FilesFolder, default_files_dir  # noqa: PLC0415
    from cubicle.orchestrator.mcp.server import serve_http, serve_stdio  # noqa: PLC0415

    if args.ready_timeout <= 0:
        raise ConfigError(f"--ready-timeout {args.ready_timeout:g}: must be more than 0 s")
    files = FilesFolder(args.files if args.files is not None else default_files_dir())
    if files.root.exists() and not files.root.is_dir():
        raise ConfigError(f"--files {files.root}: not a folder")
    desktops = Desktops(args.backend, ready_timeout_s=args.ready_timeout, files=files)
    if not args.http:
        if args.port is not None or args.token_file is not None:
            raise ConfigError("--port and --token-file go with --http")
        return serve_stdio(desktops)
    port = DEFAULT_PORT if args.port is None else args.port
    if not 0 <= port < 65536:
        raise ConfigError(f"--port {port} is not a TCP port")
    token = resolve_token()
    given: Path | None = args.token_file
    return serve_http(
        desktops,
        port=port,
        token=token,
        token_file=(lambda _port: given) if given is not None else default_token_file,
    )


def register(sub: Any) -> None:
    """Add ``mcp`` to the ``cubicle`` subcommand parser."""
    p = sub.add_parser(
        "mcp",
        help="serve the desktop as MCP tools (stdio; --http for streamable HTTP with a token)",
        description=__doc__,
    )
    p.add_argument(
        "--http",
        action="store_true",
        help="serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio",
    )
    p.add_argument(
        "--port", type=int, help=f"with --http: the port (default {DEFAULT_PORT}; 0: any free one)"
    )
    p.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help="with --http: where to write the token (default "
        "$XDG_STATE_HOME/cubicle/mcp/PORT.token)",
    )
    p.add_argument(
        "--backend",
        default="docker",
        choices=("docker", "vm"),
        help="the backend of create_sandbox calls that name none (default docker)",
    )
    p.add_argument(
        "--files",
        type=Path,
        metavar="DIR",
        help="the one host folder the upload and download tools read and write; their local "
        "paths are relative to it (default $XDG_DATA_HOME/cubicle/mcp-files, i.e. "
        "~/.local/share/cubicle/mcp-files; created 0700 at the first use)",
    )
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=90.0,
        metavar="S",
        help="seconds a new sandbox may take to start (default 90)",
    )
    p.set_defaults(func=cmd_mcp)
