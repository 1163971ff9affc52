"""Which Docker engine a sandbox lives on: engine URLs, connections, and the id → engine book.

An **engine** is a URL the Docker API answers at:

==================================  ===========================================================
``unix:///var/run/docker.sock``     the local engine (the default)
``tcp://HOST:PORT``                 a remote engine over TLS, verified both ways: the client
                                    certificate, key and CA are ``cert.pem``, ``key.pem`` and
                                    ``ca.pem`` in ``DOCKER_CERT_PATH`` (default ``~/.docker``).
                                    Plain, unauthenticated ``tcp://`` is refused: whoever
                                    reaches such a port is root on that machine.
``ssh://[USER@]HOST[:PORT]``        a remote engine over ssh (docker-py's paramiko transport,
                                    which runs ``docker system dial-stdio`` on the remote host):
                                    ``~/.ssh/config`` (HostName, Port, User, IdentityFile,
                                    ProxyCommand) and ``~/.ssh/known_hosts`` apply; an unknown
                                    host key is refused.
==================================  ===========================================================

**Selection.** An explicit engine — ``--engine URL`` on the command line, which sets
:data:`~cubicle.orchestrator.providers.DOCKER_ENGINE_ENV` (``CUBICLE_DOCKER_HOST``) — wins
everywhere. Without one, new sandboxes go to the *default* engine, ``DOCKER_HOST`` or the local
socket.

**A sandbox id leads to its engine through a book kept on the creating host** (decided over
carrying the engine in the id: ids stay short and stable, and a URL with a user name or a port
has no place in file names, logs and labels). Before anything is created on an engine,
:class:`EngineBook` writes ``<state>/docker-engines/<id>.json`` (``<state>`` is
``$XDG_STATE_HOME/cubicle``, default ``~/.local/state/cubicle``, a folder only its owner may
write: :func:`cubicle.orchestrator.hostdirs.host_folder`) naming the engine, the TLS folder and the
creating process. ``destroy`` removes the entry after the sandbox's objects; ``gc`` removes
entries whose sandbox has no object left on its engine and whose creating process is gone. For an
id, the engine is: the explicit one, else the book's, else the default. ``ls`` and ``gc`` cover
every engine the host knows: the default one and every engine in the book (or only the explicit
one). Another host reaches a sandbox with ``--engine``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import docker
import docker.constants
import docker.tls
import docker.utils

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ConfigError, EngineUnavailable
from cubicle.orchestrator.hostdirs import host_folder, read_host_file
from cubicle.orchestrator.providers import DOCKER_ENGINE_ENV
from cubicle.orchestrator.providers.docker.errors import ENGINE_HINT, map_docker_errors

__all__ = [
    "LOCAL_URL",
    "Engine",
    "EngineBook",
    "EngineRecord",
    "connect",
    "default_engine",
    "explicit_engine",
    "state_dir",
]

LOCAL_URL: Final = "unix:///var/run/docker.sock"
ENGINE_TIMEOUT_S: Final = 60
CONNECT_TIMEOUT_S: Final = 10
TIMEOUTS: Final = (CONNECT_TIMEOUT_S, ENGINE_TIMEOUT_S)
"""(connect, read) seconds of a tcp:// engine's requests."""
TLS_FILES: Final = ("ca.pem", "cert.pem", "key.pem")
SCHEMES: Final = ("unix", "tcp", "ssh")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Engine:
    """A Docker engine: its URL and, for ``tcp://``, the folder of its TLS files."""

    url: str
    cert_path: str | None = None

    @classmethod
    def parse(cls, url: str, *, cert_path: str | None = None) -> Engine:
        """Check ``url`` and, for ``tcp://``, find its TLS files (``cert_path``, else
        ``DOCKER_CERT_PATH``, else ``~/.docker``).

        :raises ConfigError: naming what is wrong (scheme, host, missing TLS files).
        """
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise ConfigError(
                f"Docker engine {url!r}: the scheme must be one of "
                f"{', '.join(s + '://' for s in SCHEMES)}",
                hint="e.g. unix:///var/run/docker.sock, tcp://host:2376 (TLS), ssh://user@host",
            )
        if parts.scheme == "unix":
            if not parts.path:
                raise ConfigError(f"Docker engine {url!r}: no socket path after unix://")
            return cls(url)
        if not parts.hostname:
            raise ConfigError(f"Docker engine {url!r}: no host name")
        try:
            parts.port  # noqa: B018 — raises ValueError for a port that is not a number
        except ValueError:
            raise ConfigError(f"Docker engine {url!r}: the port is not a number") from None
        if parts.scheme == "ssh":
            return cls(url)
        folder = cert_path or os.environ.get("DOCKER_CERT_PATH") or "~/.docker"
        folder = str(Path(folder).expanduser().resolve())
        missing = [name for name in TLS_FILES if not (Path(folder) / name).is_file()]
        if missing:
            raise ConfigError(
                f"Docker engine {url!r} needs TLS: {', '.join(missing)} not found in {folder}",
                hint="put the engine's CA and your client certificate and key (ca.pem, cert.pem, "
                "key.pem) in DOCKER_CERT_PATH; plain tcp:// without TLS is refused",
            )
        return cls(url, folder)

    @property
    def is_local(self) -> bool:
        """Reached through a unix socket on this host."""
        return self.url.startswith("unix://")

    def __str__(self) -> str:
        return self.url


def explicit_engine() -> Engine | None:
    """The engine named by ``CUBICLE_DOCKER_HOST`` (``--engine``), if any."""
    url = os.environ.get(DOCKER_ENGINE_ENV, "").strip()
    return Engine.parse(url) if url else None


def default_engine() -> Engine:
    """``DOCKER_HOST``, else the local socket: where sandboxes go when none is named."""
    url = os.environ.get("DOCKER_HOST", "").strip() or LOCAL_URL
    return Engine.parse(url)


_SHARED: dict[Engine, docker.DockerClient] = {}


def connect(engine: Engine) -> docker.DockerClient:
    """One connection per process and engine, closed at exit.

    :raises EngineUnavailable: the engine does not answer (or its socket does not exist).
    """
    client = _SHARED.get(engine)
    if client is not None:
        return client
    where = f"connecting to the Docker engine at {engine}"
    if engine.is_local:
        socket_path = engine.url.removeprefix("unix://")
        if not Path(socket_path).exists():
            # checked here: docker-py leaks its socket when the path does not exist
            raise EngineUnavailable(
                f"no Docker engine at {engine}: {socket_path} does not exist", hint=ENGINE_HINT
            )
    with map_docker_errors(where):
        try:
            client = _open(engine)
        except Exception as exc:  # paramiko and ssl errors are not docker-py's
            if isinstance(exc, docker.errors.DockerException | OSError):
                raise
            raise EngineUnavailable(
                f"the Docker engine at {engine} is not usable: {type(exc).__name__}: {exc}",
                hint="for ssh://, check ~/.ssh/config and that the host key is in "
                "~/.ssh/known_hosts (unknown host keys are refused)",
            ) from exc
    if not _SHARED:
        atexit.register(_close_shared)
    _SHARED[engine] = client
    return client


def _open(engine: Engine) -> docker.DockerClient:
    """A client of ``engine``. Over TLS it trusts the engine's CA alone: requests would
    otherwise let ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` replace it (and take proxies from
    the environment), so the API version is asked for on a client that ignores them."""
    tls = _tls(engine)
    if not tls:
        return docker.DockerClient(
            base_url=engine.url, timeout=ENGINE_TIMEOUT_S, version="auto", use_ssh_client=False
        )
    newest = docker.constants.DEFAULT_DOCKER_API_VERSION
    probe = docker.APIClient(base_url=engine.url, tls=tls, timeout=ENGINE_TIMEOUT_S, version=newest)
    try:
        probe.trust_env = False
        # an unreachable host fails in CONNECT_TIMEOUT_S, not in the 60 s a slow answer may take
        setattr(probe, "timeout", TIMEOUTS)  # noqa: B010 — docker-py types it as a number
        server = str(probe.version(api_version=False)["ApiVersion"])
    finally:
        probe.close()
    version = server if docker.utils.version_lt(server, newest) else newest
    client = docker.DockerClient(
        base_url=engine.url, tls=tls, timeout=ENGINE_TIMEOUT_S, version=version
    )
    client.api.trust_env = False
    setattr(client.api, "timeout", TIMEOUTS)  # noqa: B010 — requests takes (connect, read)
    return client


def _tls(engine: Engine) -> docker.tls.TLSConfig | bool:
    if engine.cert_path is None:
        return False
    folder = Path(engine.cert_path)
    return docker.tls.TLSConfig(
        client_cert=(str(folder / "cert.pem"), str(folder / "key.pem")),
        ca_cert=str(folder / "ca.pem"),
        verify=True,
    )


def _close_shared() -> None:
    for client in _SHARED.values():
        with contextlib.suppress(Exception):
            client.close()
    _SHARED.clear()


def state_dir() -> Path:
    """``$XDG_STATE_HOME/cubicle`` (default ``~/.local/state/cubicle``), not created here."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(base) / "cubicle"


@dataclass(frozen=True)
class EngineRecord:
    """One entry of the book: a sandbox, its engine and the process that created it."""

    sandbox_id: str
    engine: str
    cert_path: str | None
    owner_pid: int
    owner_start: int
    created_at: float

    def engine_of(self) -> Engine:
        return Engine(self.engine, self.cert_path)

    def owner_gone(self) -> bool:
        """The creating process (always of this host: the book is per host) has ended."""
        return L.process_start_ticks(self.owner_pid) != self.owner_start


class EngineBook:
    """The creating host's sandbox id → engine entries, one JSON file per id (see the module
    docstring). Entries are written once (``O_EXCL``) and removed, never changed."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or state_dir() / "docker-engines"

    def _path(self, sandbox_id: str) -> Path:
        return self.folder / f"{sandbox_id}.json"

    def record(self, sandbox_id: str, engine: Engine) -> None:
        """Write the entry for a sandbox about to be created on ``engine``."""
        host_folder(self.folder.parent)
        host_folder(self.folder)
        owner = L.Owner.current()
        entry = EngineRecord(
            sandbox_id, engine.url, engine.cert_path, owner.pid, owner.start_ticks, time.time()
        )
        fd = os.open(self._path(sandbox_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(entry), out)

    def lookup(self, sandbox_id: str) -> EngineRecord | None:
        """The entry of ``sandbox_id``, or None (none, or unreadable: warned).

        :raises ConfigError: the book's folder or the entry could have been written by another
            user (:func:`~cubicle.orchestrator.hostdirs.read_host_file`): it names an engine
            socket cubicle would talk to, so it is trusted only as cubicle left it.
        """
        path = self._path(sandbox_id)
        if not self.folder.is_dir():
            return None
        text = read_host_file(path)
        if text is None:
            return None
        try:
            return EngineRecord(**json.loads(text))
        except (ValueError, TypeError, RecursionError) as exc:
            log.warning("ignoring the engine book entry %s: %s", path, exc)
            return None

    def forget(self, sandbox_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(sandbox_id).unlink()

    def entries(self) -> Iterator[EngineRecord]:
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("*.json")):
            entry = self.lookup(path.stem)
            if entry is not None:
                yield entry

    def engines(self) -> list[Engine]:
        """Every engine with at least one entry, in first-seen order."""
        seen: dict[Engine, None] = {}
        for entry in self.entries():
            seen.setdefault(entry.engine_of(), None)
        return list(seen)
