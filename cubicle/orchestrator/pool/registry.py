"""Pool records on the host: what each pool is (its shape and size), until when, and its lock.

One pool per *shape* (:class:`PoolShape`: backend, engine, image, screen, network, CPU, memory
and pids limits); its key is a hash of the shape. Files, in a folder only we can write
(``~/.cache/cubicle/pools``, or ``CUBICLE_POOL_DIR``;
:func:`cubicle.orchestrator.hostdirs.host_folder`):

- ``<key>.json`` (0600): the :class:`PoolRecord`. A pool *exists* while its record does and has
  not expired; ``pool drain`` and ``gc`` (after the expiry) remove it.
- ``<key>.lock``: whoever makes members of the pool (``pool fill`` or the refiller) holds an
  exclusive ``flock`` on it, so one filler works per pool at a time.
- ``<key>.log``: the refiller's log.

Records hold no secret; the folder check is so that nobody else can plant a pool for us.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.hostdirs import host_folder
from cubicle.orchestrator.provider import SandboxSpec

__all__ = [
    "DIR_ENV",
    "PoolRecord",
    "PoolShape",
    "fill_lock",
    "has_pools",
    "pool_dir",
    "read",
    "records",
    "remove",
    "write",
]

DIR_ENV: Final = "CUBICLE_POOL_DIR"
"""Overrides the folder of pool records (default ``~/.cache/cubicle/pools``)."""


@dataclass(frozen=True)
class PoolShape:
    """What a pool's members are; a sandbox request matches a pool when its shape is equal."""

    backend: str
    engine: str
    """Where the members run: the Docker engine's URL (see ``docker_engine``)."""
    image: str
    screen: tuple[int, int]
    network: str
    cpus: float
    memory_mb: int
    pids_limit: int

    @classmethod
    def of(cls, backend: str, engine: str, image: str, spec: SandboxSpec) -> PoolShape:
        return cls(
            backend=backend,
            engine=engine,
            image=image,
            screen=(int(spec.screen[0]), int(spec.screen[1])),
            network=str(spec.network),
            cpus=float(spec.cpus),
            memory_mb=int(spec.memory_mb),
            pids_limit=int(spec.pids_limit),
        )

    @property
    def key(self) -> str:
        """12 hex digits naming the pool (in member names and record files)."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class PoolRecord:
    """A pool: its shape, how many ready members it keeps, and when it (and they) expire."""

    shape: PoolShape
    size: int
    expires_at: float

    @property
    def key(self) -> str:
        return self.shape.key

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["key"] = self.key
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PoolRecord:
        raw = dict(data["shape"])  # type: ignore[call-overload]
        width, height = raw["screen"]
        shape = PoolShape(
            backend=str(raw["backend"]),
            engine=str(raw["engine"]),
            image=str(raw["image"]),
            screen=(int(width), int(height)),
            network=str(raw["network"]),
            cpus=float(raw["cpus"]),
            memory_mb=int(raw["memory_mb"]),
            pids_limit=int(raw["pids_limit"]),
        )
        return cls(
            shape=shape,
            size=int(data["size"]),  # type: ignore[call-overload]
            expires_at=float(data["expires_at"]),  # type: ignore[arg-type]
        )


def _base_dir() -> Path:
    override = os.environ.get(DIR_ENV)
    return Path(override) if override else Path.home() / ".cache" / "cubicle" / "pools"


def pool_dir() -> Path:
    """The folder of pool records (created 0700, checked)."""
    return host_folder(_base_dir())


def has_pools() -> bool:
    """Whether any pool record exists (cheap: one directory read, nothing created): the fast
    path of every ``Sandbox.create`` when no pool is in use."""
    try:
        with os.scandir(_base_dir()) as entries:
            return any(entry.name.endswith(".json") for entry in entries)
    except OSError:
        return False


def _path(key: str, suffix: str) -> Path:
    if len(key) != 12 or not all(c in "0123456789abcdef" for c in key):
        raise ConfigError(f"not a pool key: {key!r} (12 hex digits, see: cubicle pool ls)")
    return pool_dir() / f"{key}{suffix}"


def write(record: PoolRecord) -> None:
    """Write the record atomically, mode 0600."""
    path = _path(record.key, ".json")
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record.to_json(), out)
    os.replace(tmp, path)


def read(key: str) -> PoolRecord | None:
    """The pool ``key``, or None (no record, or one that does not parse)."""
    path = _path(key, ".json")
    try:
        with open(path, encoding="utf-8") as source:
            return PoolRecord.from_json(json.load(source))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def records() -> list[PoolRecord]:
    """Every pool record (expired ones too), by expiry."""
    if not has_pools():
        return []
    found = []
    for path in sorted(pool_dir().glob("*.json")):
        record = read(path.stem)
        if record is not None:
            found.append(record)
    return sorted(found, key=lambda r: r.expires_at)


def remove(key: str) -> None:
    """Forget pool ``key`` (its record and log; the lock file stays harmlessly). Idempotent."""
    _path(key, ".json").unlink(missing_ok=True)
    _path(key, ".log").unlink(missing_ok=True)


def log_path(key: str) -> Path:
    return _path(key, ".log")


@contextlib.contextmanager
def fill_lock(key: str, *, wait_s: float | None) -> Iterator[bool]:
    """Hold pool ``key``'s filler lock inside the block; yields False (lock not held) when it
    could not be had within ``wait_s`` seconds (``0``: do not wait; ``None``: wait forever)."""
    fd = os.open(_path(key, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.05)
        yield True
    finally:
        os.close(fd)


def lock_free(key: str) -> bool:
    """No filler holds pool ``key``'s lock right now (a snapshot)."""
    with fill_lock(key, wait_s=0) as held:
        return held
