"""The files folder of ``cubicle mcp`` on the real file system: created 0700 at its first use;
paths inside it resolved, every way out of it (absolute, ``..``, a symbolic link anywhere on the
path) refused naming the field."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.mcp.files import FilesFolder, check_relative, default_files_dir


@pytest.fixture
def folder(tmp_path: Path) -> FilesFolder:
    root = tmp_path / "files"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("x")
    files = FilesFolder(root)
    files.ensure()
    (root / "in").mkdir()
    (root / "in" / "doc.txt").write_text("doc")
    os.symlink(tmp_path / "outside", root / "out")
    os.symlink(tmp_path / "outside" / "secret", root / "in" / "secret")
    os.symlink("doc.txt", root / "in" / "inner")  # a link staying inside is refused too
    return files


def test_created_0700_with_its_parents_at_the_first_use(tmp_path: Path) -> None:
    files = FilesFolder(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()
    assert files.destination(".", "local") == (tmp_path / "a" / "b").resolve()
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700


def test_a_file_where_the_folder_should_be_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match=r"files folder .* is not a folder"):
        FilesFolder(tmp_path / "f").source("x", "local")


def test_the_default_is_under_xdg_data_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/somewhere")
    assert default_files_dir() == Path("/somewhere/cubicle/mcp-files")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_files_dir() == Path.home() / ".local/share/cubicle/mcp-files"


def test_paths_inside_resolve(folder: FilesFolder) -> None:
    root = folder.root.resolve()
    assert folder.source("in/doc.txt", "local") == root / "in" / "doc.txt"
    assert folder.source("./in//doc.txt", "local") == root / "in" / "doc.txt"
    assert folder.source("", "local") == root
    assert folder.destination("in/new.txt", "local") == root / "in" / "new.txt"
    assert folder.relative(root / "in" / "new.txt") == "in/new.txt"


@pytest.mark.parametrize(
    ("relative", "said"),
    [
        ("/etc/passwd", "local: an absolute path is refused"),
        ("../outside/secret", "local: a '..' part is refused"),
        ("in/../../outside", "local: a '..' part is refused"),
        ("a\0b", "local: a NUL character is refused"),
        ("out", "local: 'out' is a symbolic link"),
        ("out/secret", "local: 'out' in 'out/secret' is a symbolic link"),
        ("in/secret", "local: 'in/secret' is a symbolic link"),
        ("in/inner", "local: 'in/inner' is a symbolic link"),
        ("in/doc.txt/x", "local: 'in/doc.txt' in 'in/doc.txt/x' is not a folder"),
        ("nope/x", "local: folder 'nope' does not exist"),
    ],
)
def test_every_way_out_is_refused_naming_the_field(
    folder: FilesFolder, relative: str, said: str
) -> None:
    for resolve in (folder.source, folder.destination):
        with pytest.raises(ConfigError) as refused:
            resolve(relative, "local")
        assert said in str(refused.value), str(refused.value)


def test_the_schema_check_refuses_what_leaves_the_folder() -> None:
    assert check_relative("a/./b") == "a/./b"
    for bad in ("/x", "..", "a/../b"):
        with pytest.raises(ValueError, match="refused"):
            check_relative(bad)
