"""Harbor-shaped task folders without a sandbox: every shipped task has an up-to-date copy in
examples/harbor/ (or is named there with why it has none), the copies load as the tasks they
copy, a folder that is not cubicle's desktop is refused by name, and the eval's live panel draws
the counts on a terminal while the plain lines stay as they were."""

from __future__ import annotations

import io
import shutil
import stat
from pathlib import Path

import pytest

from cubicle.orchestrator.eval.progress import Progress, wants_live
from cubicle.orchestrator.eval.results import AttemptRecord
from cubicle.orchestrator.eval.suite import SuiteError, load_suite
from cubicle.orchestrator.harbor import HarborTaskError, load_harbor
from cubicle.orchestrator.harbor_export import (
    FORM_DATA,
    NotExpressible,
    export_harbor,
    harbor_files,
    readme,
)
from cubicle.orchestrator.modelrun.guest_steps import HELPER_FOLDER
from cubicle.orchestrator.tasks import load_task, shipped_tasks
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
COPIES = REPO / "examples" / "harbor"
REGENERATE = "out of date: run scripts/harbor-export"


def test_every_shipped_task_has_an_up_to_date_harbor_copy_or_says_why_not() -> None:
    text, copied = readme(shipped_tasks())
    assert (COPIES / "README.md").read_text("utf-8") == text, f"README.md {REGENERATE}"
    for task in shipped_tasks():
        folder = COPIES / task.name
        if task not in copied:
            assert not folder.exists(), f"{folder}: {task.name} has no Harbor copy"
            assert f"- `{task.name}`: " in text
            continue
        expected = harbor_files(task)
        found = {
            str(p.relative_to(folder)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
            for p in folder.rglob("*")
            if p.is_file()
        }
        assert found == expected, f"{folder} {REGENERATE}"
    folders = {p.name for p in COPIES.iterdir() if p.is_dir()}
    assert folders == {task.name for task in copied}, f"a copy of no shipped task: {REGENERATE}"


def test_tasks_that_need_a_person_are_not_expressible_naming_why() -> None:
    with pytest.raises(NotExpressible, match="sign in"):
        harbor_files(load_task("sign-in"))
    with pytest.raises(NotExpressible, match="request_user_response"):
        harbor_files(load_task("ask-user"))


def test_the_copies_load_as_the_tasks_they_copy_and_tasks_stays_toml_only() -> None:
    suite = load_suite(COPIES)
    copied = [t.name for t in readme(shipped_tasks())[1]]
    assert suite.names == copied
    for harbor in suite.tasks:
        original = load_task(harbor.name)
        assert harbor.harbor is not None and harbor.harbor.has_solution
        assert harbor.prompt == original.prompt.strip()
        assert harbor.setup == original.setup and harbor.limits == original.limits
        assert harbor.checks == [] and harbor.scripted is None
    assert all(t.harbor is None for t in load_suite(REPO / "tasks").tasks)
    # a Harbor folder itself is a suite of one, and a list file may name one
    assert load_suite(COPIES / "editor-save").names == ["editor-save"]
    assert f"~/{HELPER_FOLDER}/form-data.json" == FORM_DATA


def test_a_task_copying_host_files_in_exports_them_and_loads_back_the_same(
    tmp_path: Path,
) -> None:
    (tmp_path / "inputs" / "deep").mkdir(parents=True)
    (tmp_path / "inputs" / "deep" / "data.bin").write_bytes(b"\x00\xffbytes")
    (tmp_path / "report.txt").write_text("report\n", "utf-8")
    (tmp_path / "report.txt").chmod(0o640)
    (tmp_path / "t.toml").write_text(
        'name = "with-sources"\nprompt = "Look at {WORKDIR}."\n'
        '[[setup.files]]\npath = "in/"\nsource = "inputs"\n'
        '[[setup.files]]\npath = "r.txt"\nsource = "report.txt"\n'
        '[[checks]]\nfile = "{WORKDIR}/out.txt"\ncontains = "x"\n',
        "utf-8",
    )
    task = load_task(tmp_path / "t.toml")
    folder = export_harbor(task, tmp_path / "harbor")
    copied = load_harbor(folder)
    for original, item in zip(task.setup.files, copied.setup.files, strict=True):
        source, there = task.source_path(original), copied.source_path(item)
        assert there.is_relative_to(folder / "environment" / "files")
        assert item.path == original.path and there.name == source.name
    assert (folder / "environment/files/0/inputs/deep/data.bin").read_bytes() == b"\x00\xffbytes"
    assert stat.S_IMODE((folder / "environment/files/1/report.txt").stat().st_mode) == 0o640


def _copy(tmp_path: Path, name: str = "editor-save") -> Path:
    folder = tmp_path / name
    shutil.copytree(COPIES / name, folder)
    return folder


@pytest.mark.parametrize(
    ("plant", "named"),
    [
        (lambda f: (f / "environment" / "Dockerfile").write_text("FROM x\n"), "Dockerfile"),
        (
            lambda f: (f / "environment" / "docker-compose.yaml").write_text("services: {}\n"),
            "docker-compose.yaml",
        ),
        (
            lambda f: (f / "task.toml").write_text('[environment]\ndocker_image = "ubuntu"\n'),
            "environment.docker_image",
        ),
        (lambda f: (f / "environment" / "cubicle-desktop.toml").unlink(), "cubicle-desktop.toml"),
        (lambda f: shutil.rmtree(f / "environment"), "no environment/ folder"),
        (lambda f: (f / "tests" / "test.sh").unlink(), "no tests/test.sh"),
        (lambda f: (f / "instruction.md").write_text("\n"), "instruction.md: empty"),
        (
            lambda f: (f / "environment" / "cubicle-desktop.toml").write_text('screen = "big"\n'),
            "screen",
        ),
    ],
)
def test_a_folder_that_is_not_a_cubicle_desktop_task_is_refused_by_name(
    tmp_path: Path, plant: object, named: str
) -> None:
    folder = _copy(tmp_path)
    plant(folder)  # type: ignore[operator]
    with pytest.raises(HarborTaskError, match=named.replace(".", r"\.")):
        load_harbor(folder)
    with pytest.raises(SuiteError, match=named.replace(".", r"\.")):
        load_suite(tmp_path)


def test_cubicle_eval_refuses_a_foreign_environment_before_anything_starts(
    tmp_path: Path,
) -> None:
    folder = _copy(tmp_path)
    (folder / "environment" / "Dockerfile").write_text("FROM debian\n", "utf-8")
    done = run_cli("eval", str(folder), "--oracle", "--out", str(tmp_path / "out"), timeout=60)
    assert done.returncode != 0
    assert f"{folder}/environment: holds Dockerfile: an environment other than" in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_live_panel_draws_the_counts_and_the_plain_lines_stay_the_same() -> None:
    record = AttemptRecord("editor-save", 1, "failed", seconds=3.0, tokens=1200, error="x")
    plain = io.StringIO()
    assert not wants_live(plain)
    progress = Progress(2, stream=plain)
    progress.start("editor-save", 1)
    progress.end(record)
    progress.close()
    lines = plain.getvalue().splitlines()
    assert lines[0] == "cubicle eval: editor-save #1: started"
    assert lines[1].startswith("cubicle eval: editor-save #1: failed in 3.0 s (x) [1/2] done 1, ")
    assert "running 0, failed 1, ETA " in lines[1] and lines[1].endswith(", tokens 1200")

    terminal = io.StringIO()
    live = Progress(3, stream=terminal, live=True)
    live.start("editor-save", 1)
    live.start("desktop", 1)
    shown = live.snapshot()
    assert (shown.done, shown.failed, sorted(shown.running)) == (
        0,
        0,
        ["desktop #1", "editor-save #1"],
    )
    live.end(record)
    live.close()
    drawn = terminal.getvalue()
    assert "\x1b[" in drawn, "drawn for a terminal"
    assert "cubicle eval: editor-save #1: failed in 3.0 s" in drawn, "the lines scroll above"
    last_panel = drawn.rsplit("cubicle eval", 1)[-1]
    for part in ("1/3", "▸ desktop #1", "1,200", "ETA "):
        assert part in last_panel, (part, last_panel)
    assert "editor-save #1 " not in last_panel.split("▸", 1)[-1], "no longer running"
