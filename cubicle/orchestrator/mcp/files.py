"""The files folder of ``cubicle mcp``: the one host folder its ``upload`` and ``download`` tools
read and write.

The model chooses a tool's arguments, so none may reach anywhere else on the host. A local path
is relative to the folder and names a place inside it:

- syntax (checked by the schema, :func:`check_relative`): an absolute path, a ``..`` part or a
  NUL is refused; empty and ``.`` parts are dropped (``""`` and ``"."`` are the folder itself);
- at the call (:meth:`FilesFolder.source`, :meth:`FilesFolder.destination`): the path is walked
  one part at a time from the folder, each folder opened with ``O_NOFOLLOW`` relative to the one
  before, and a symbolic link anywhere on it — the last part included — is refused by name (a
  link is never followed, wherever it points). The folder itself may be a link (the user chose
  it).

Nothing but the user makes links in the folder: a download never creates one and refuses a guest
folder holding one (:mod:`cubicle.orchestrator.file_transfer`), so the guest cannot plant a link
that a later call would follow.

The folder is ``--files DIR``, by default ``$XDG_DATA_HOME/cubicle/mcp-files``
(``~/.local/share/cubicle/mcp-files`` without the variable, as under the bare environment the
``mcp`` stdio client passes). It is created (mode 0700) at its first use, not at the start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Final

from cubicle.orchestrator.errors import ConfigError

__all__ = ["MAX_PATH_CHARS", "FilesFolder", "check_relative", "default_files_dir"]

MAX_PATH_CHARS: Final = 4096


def default_files_dir() -> Path:
    """``$XDG_DATA_HOME/cubicle/mcp-files`` (``~/.local/share`` without the variable)."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "cubicle" / "mcp-files"


def _parts(relative: str) -> list[str]:
    """The parts of ``relative``, checked (:func:`check_relative`), empty and ``.`` dropped.

    :raises ValueError: saying what is refused (the caller names the field)."""
    if "\0" in relative:
        raise ValueError("a NUL character is refused in a path")
    if relative.startswith("/"):
        raise ValueError(
            "an absolute path is refused: paths are relative to the server's files folder"
        )
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("a '..' part is refused: paths stay inside the server's files folder")
    return parts


def check_relative(relative: str) -> str:
    """``relative`` if it is a path relative to the files folder that stays inside it (no
    absolute path, no ``..`` part, no NUL); the schemas' validator.

    :raises ValueError: saying what is refused."""
    _parts(relative)
    return relative


class FilesFolder:
    """The files folder at ``root`` (created 0700 at the first use).

    :param root: the folder (``~`` expanded; made absolute)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.abspath(root.expanduser()))

    def ensure(self) -> Path:
        """The folder's real path, created (mode 0700, its parents as ``mkdir -p``) if missing.

        :raises ConfigError: it cannot be created, or is not a folder."""
        try:
            self.root.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ConfigError(
                f"files folder {str(self.root)!r}: cannot create it: {exc.strerror or exc}",
                hint="name another with cubicle mcp --files DIR",
            ) from None
        else:
            os.chmod(self.root, 0o700)  # mkdir's mode went through the umask
        if not self.root.is_dir():
            raise ConfigError(
                f"files folder {str(self.root)!r} is not a folder",
                hint="name another with cubicle mcp --files DIR",
            )
        return Path(os.path.realpath(self.root))

    def source(self, relative: str, field: str) -> Path:
        """The existing file or folder ``relative`` names in the folder (what an upload reads).

        :raises ConfigError: naming ``field``: refused syntax, a symbolic link on the way, or
            nothing there."""
        path, found = self._walk(relative, field)
        if found is None:
            raise ConfigError(f"{field}: {relative!r} does not exist in the files folder")
        return path

    def destination(self, relative: str, field: str) -> Path:
        """Where ``relative`` points in the folder (what a download writes): its parent folders
        exist and are no links, and it is absent, a file or a folder, but not a link.

        :raises ConfigError: naming ``field``."""
        return self._walk(relative, field)[0]

    def relative(self, path: str | os.PathLike[str]) -> str:
        """``path`` (inside the folder) as the tools show it: relative to the folder."""
        return os.path.relpath(path, os.path.realpath(self.root))

    def _walk(self, relative: str, field: str) -> tuple[Path, os.stat_result | None]:
        try:
            parts = _parts(relative)
        except ValueError as exc:
            raise ConfigError(f"{field}: {exc} (got {relative!r:.80})") from None
        root = self.ensure()
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for depth, part in enumerate(parts[:-1]):
                try:
                    inner = os.open(
                        part,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=fd,
                    )
                except OSError as exc:
                    shown = "/".join(parts[: depth + 1])
                    raise _refusal(field, relative, shown, (fd, part), exc) from None
                os.close(fd)
                fd = inner
            if not parts:
                return root, os.stat(fd)
            try:
                found: os.stat_result | None = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                found = None
            if found is not None and stat.S_ISLNK(found.st_mode):
                raise ConfigError(
                    f"{field}: {relative!r} is a symbolic link; links in the files folder are "
                    "never followed"
                )
            return root.joinpath(*parts), found
        finally:
            os.close(fd)


def _refusal(
    field: str, relative: str, shown: str, where: tuple[int, str], exc: OSError
) -> ConfigError:
    """Why folder ``part`` of ``where = (parent_fd, part)`` (``shown`` from the root) of
    ``relative`` could not be entered."""
    parent, part = where
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode):
            return ConfigError(
                f"{field}: {shown!r} in {relative!r} is a symbolic link; links in the files "
                "folder are never followed"
            )
    if exc.errno == errno.ENOENT:
        return ConfigError(f"{field}: folder {shown!r} does not exist in the files folder")
    if exc.errno == errno.ENOTDIR:
        return ConfigError(f"{field}: {shown!r} in {relative!r} is not a folder")
    return ConfigError(f"{field}: cannot open {shown!r} in the files folder: {exc.strerror}")
