"""Host folders cubicle keeps are refused when another user could write them or a parent."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.hostdirs import check_host_folder, host_folder

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand folders to others")


def test_a_new_folder_is_created_private_even_under_sticky_tmp(tmp_path: Path) -> None:
    made = host_folder(tmp_path / "a" / "b")
    for folder in (made, made.parent):
        info = folder.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, os.geteuid())
    sticky = Path("/tmp")
    assert sticky.stat().st_mode & stat.S_ISVTX and sticky.stat().st_uid == 0
    check_host_folder(made)  # /tmp (1777, root) is an acceptable parent


@pytest.mark.parametrize("mode", [0o770, 0o757, 0o777])
def test_a_folder_others_can_write_is_refused_naming_it(tmp_path: Path, mode: int) -> None:
    folder = host_folder(tmp_path / "mine")
    folder.chmod(mode)
    with pytest.raises(ConfigError, match=f"refusing the host folder {folder}: .*writable"):
        check_host_folder(folder)


def test_a_writable_parent_is_refused_and_nothing_is_created_under_it(tmp_path: Path) -> None:
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)  # not sticky
    with pytest.raises(ConfigError, match=f"refusing the host folder {parent}: .*a parent"):
        host_folder(parent / "x" / "y")
    assert list(parent.iterdir()) == []


@needs_root
def test_a_folder_or_parent_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        check_host_folder(theirs)
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        host_folder(theirs / "inside")


@needs_root
def test_a_symlink_to_another_users_folder_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    link = host_folder(tmp_path / "mine") / "link"
    link.symlink_to(theirs)
    with pytest.raises(ConfigError, match=str(theirs)):
        check_host_folder(link)


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        check_host_folder(path)


def test_a_mode_that_lets_others_write_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lets group or others write"):
        host_folder(tmp_path / "x", mode=0o775)
