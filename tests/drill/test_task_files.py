"""Task files: the shipped ones load and can run offline; a malformed file gets an error naming
the file and the field; `cubicle run` resolves flags over the file over the defaults."""

from __future__ import annotations

import argparse
import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from cubicle.drivers.scripted_model import parse_script
from cubicle.orchestrator.cli import main
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.run_task import effective_settings
from cubicle.orchestrator.tasks import (
    TASKS_DIR,
    TaskFileError,
    fill,
    load_task,
    parse_task,
    shipped_tasks,
)
from tests.drill.conftest import PYTHON, REPO

MINIMAL = 'prompt = "do it"\n'


def _write(tmp_path: Path, text: str, name: str = "t.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_every_shipped_task_loads_and_its_script_types_what_its_checks_expect() -> None:
    tasks = shipped_tasks()
    names = [t.name for t in tasks]
    assert {
        "ask-user",
        "desktop",
        "editor-save",
        "browser-form",
        "sign-in",
        "terminal-output",
        "save-dialog",
        "files-rename",
        "files-drag",
        "scroll-read",
    } <= set(names)
    assert names == sorted(names)
    for task in tasks:
        assert task.scripted is not None, f"{task.name} cannot run offline"
        assert task.checks, f"{task.name} checks nothing"
        values = task.placeholders("/home/cubicle")
        script = parse_script(fill(task.script(), values), task.name)
        assert not any(turn.before for turn in script.turns), "pixels only: no guest steps"
        first = script.turns[0]
        assert (first.is_call or first.is_function_call) and script.turns[-1].message
        called = {turn.function[0] for turn in script.turns if turn.function is not None}
        assert called == set(task.scripted.tools), "the script calls the tools it declares"
        text = json.dumps(fill(task.script(), values), ensure_ascii=False)
        assert "{WORKDIR}" not in text and "{PORT}" not in text
        prompt = str(fill(task.prompt, values))
        assert "{" not in prompt.replace("{b}", ""), prompt
        if task.signin is not None:
            # the person's credentials reach the site through the sign-in callback only
            for secret in (task.signin.email, task.signin.password, task.signin.code):
                assert secret not in text and secret not in prompt, (task.name, "credential")
            continue
        pages = "".join(item.content or "" for item in task.setup.files)
        for check in task.checks:
            if check.form is not None:
                for value in check.form.values():
                    # typed by the script; asked for by the prompt or shown by the task's page
                    assert value in text and (value in prompt or value in pages), (task.name, value)
    desktop = load_task("desktop")
    typed = [
        action["text"]
        for turn in parse_script(desktop.script()).turns
        for action in turn.actions or ()
        if action["type"] == "type"
    ]
    note = desktop.checks[0].equals
    assert note is not None and note in typed, "the drill types exactly the note it verifies"
    assert all(part in desktop.prompt for part in note.splitlines())


def test_scroll_read_shows_its_number_only_at_the_end_of_a_long_page() -> None:
    """The model cannot pass ``scroll-read`` from the prompt or the first screen: the number is
    only on the page, after a list taller than the window, and the oracle scrolls to it."""
    task = load_task("scroll-read")
    [page] = [item.content for item in task.setup.files if item.path == "report.html"]
    [check] = task.checks
    assert check.form is not None and page is not None
    number = check.form["tracking"]
    assert number not in task.prompt and page.count(number) == 1
    assert page.index('id="rows"') < page.index(number), "the number comes after the list"
    assert "n <= 70" in page and "li { height: 40px;" in page, "70 rows of 40 px: 2800 px"
    scrolls = [
        action
        for turn in parse_script(task.script()).turns
        for action in turn.actions or ()
        if action["type"] == "scroll"
    ]
    assert scrolls and all(action["scroll_y"] > 2800 for action in scrolls)


def test_a_task_is_found_by_name_or_path_and_an_unknown_name_lists_the_shipped_ones() -> None:
    assert load_task("desktop") == load_task(TASKS_DIR / "desktop.toml")
    with pytest.raises(TaskFileError) as unknown:
        load_task("no-such-task")
    assert "no task named 'no-such-task'; shipped tasks: " in str(unknown.value)
    assert "desktop" in str(unknown.value)


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ('prompt = "x"\nbogus = 1\n', "bogus: unknown field"),
        ("[setup]\n", "prompt: required field missing"),
        ('prompt = ""\n', "prompt: String should have at least 1 character"),
        (MINIMAL + '[setup]\nscreen = "big"\n', "setup.screen: WIDTHxHEIGHT in pixels"),
        (MINIMAL + '[setup]\nopen = ["games"]\n', "setup.open: unknown app 'games'"),
        (MINIMAL + '[setup]\nworkdir = "rel"\n', "setup.workdir: an absolute guest path"),
        (MINIMAL + '[setup]\nurl = "ftp://x"\n', "setup.url: an http(s), file, data or about"),
        (MINIMAL + "[setup]\nform_server = { port = 80 }\n", "setup.form_server.port:"),
        (
            MINIMAL + '[[setup.files]]\npath = "a"\ncontent = "x"\nmode = "rwx"\n',
            "setup.files[0].mode: an octal mode like 0644",
        ),
        (
            MINIMAL + '[[setup.files]]\npath = "a"\ncontent = "x"\nmode = 0o17777\n',
            "setup.files[0].mode: a file mode between 0 and 0o7777",
        ),
        (
            MINIMAL + '[[setup.files]]\npath = "a"\n',
            "setup.files[0]: give exactly one of content (text) or source (a host path)",
        ),
        (
            MINIMAL + '[[setup.files]]\npath = "a"\nsource = "b"\nmode = 0o600\n',
            "setup.files[0]: mode is for content; a source keeps its own modes",
        ),
        (
            MINIMAL + '[[checks]]\nfile = "a"\nequals = "x"\ncontains = "y"\n',
            "checks[0]: a file check needs exactly one of equals or contains",
        ),
        (MINIMAL + '[[checks]]\nequals = "x"\n', "checks[0]: a check is exactly one of"),
        (MINIMAL + '[[checks]]\nverifier = "nocolon"\n', "checks[0]: verifier must be"),
        (MINIMAL + "[[checks]]\nform = { name = 3 }\n", "checks[0].form.name:"),
        (MINIMAL + "[limits]\nmax_steps = 0\n", "limits.max_steps:"),
        (MINIMAL + '[limits]\nstall = "8"\n', "limits.stall:"),
        (MINIMAL + "[scripted]\nmodel_view = [1, 2]\n", "scripted.script: required field"),
        ('name = "Bad Name"\n' + MINIMAL, "name: String should match pattern"),
        ('prompt = "unclosed\n', "not valid TOML"),
    ],
)
def test_a_malformed_task_file_gets_an_error_naming_the_field(
    tmp_path: Path, text: str, wanted: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TaskFileError) as error:
        load_task(path)
    assert str(path) in str(error.value)
    assert wanted in str(error.value), str(error.value)


def test_an_unreadable_task_file_and_a_missing_script_are_named(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="cannot read it"):
        load_task(tmp_path / "absent.toml")
    task = load_task(_write(tmp_path, MINIMAL + '[scripted]\nscript = "gone.json"\n'))
    with pytest.raises(TaskFileError, match=r"scripted\.script .*gone\.json"):
        task.script()
    with pytest.raises(TaskFileError, match="no \\[scripted\\] section"):
        load_task(_write(tmp_path, MINIMAL, "plain.toml")).script()


def _run_args(**given: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "task": None,
        "task_file": None,
        "network": None,
        "size": None,
        "max_steps": None,
        "stall": None,
    }
    values.update(given)
    return argparse.Namespace(**values)


def test_run_settings_a_flag_beats_the_task_file_which_beats_the_default(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        MINIMAL + '[setup]\nnetwork = "open"\nscreen = "1024x768"\n[limits]\nmax_steps = 7\n',
    )
    task, settings = effective_settings(_run_args(task_file=str(path), size="800x600"))
    assert task is not None and task.name == "t"
    assert settings.values["network"].value == "open"
    assert settings.values["network"].source == "task file"
    assert (settings.size, settings.values["size"].source) == ("800x600", "--size")
    assert (settings.max_steps, settings.stall) == (7, 8)
    assert settings.values["stall"].source == "task file"
    lines = settings.lines()
    assert f"effective task: t ({path.resolve()})" in lines
    assert "effective size: 800x600 (--size)" in lines
    _, plain = effective_settings(_run_args(task="do it"))
    assert plain.values["max_steps"].source == "default" and plain.network == "none"


def test_run_refuses_task_text_together_with_a_task_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"either as text .* or as a file"):
        effective_settings(_run_args(task="do it", task_file="desktop"))
    with pytest.raises(ConfigError, match="what should the model do"):
        effective_settings(_run_args())
    result = subprocess.run(
        [PYTHON, "-m", "cubicle.orchestrator.cli", "run", "tidy up", "--task", "desktop"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "unused"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "either as text" in result.stderr and "Traceback" not in result.stderr


def test_the_docs_task_file_example_is_a_valid_task() -> None:
    doc = REPO / "docs" / "drill-and-tasks.md"
    text = doc.read_text(encoding="utf-8").split("## Task files", 1)[1]
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    path = TASKS_DIR / "editor-save.toml"
    task = parse_task(tomllib.loads(block), source=path, default_name="x")
    assert task.name == "editor-save" and task.setup.files[0].mode == 0o600
    assert task.checks[0].equals == "milk\neggs\nbread\n"
    assert parse_script(task.script()).turns, "its script is the shipped one"


def test_drilling_a_task_that_asks_the_user_is_refused_naming_serve(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``ask-user``'s script calls a function tool a user answers: ``cubicle drill`` (offline,
    no user) refuses it before making a sandbox and says where it runs."""
    assert main(["drill", "--task", "ask-user"]) != 0
    error = capsys.readouterr().err
    assert "ask-user's script calls the function tools request_user_response" in error
    assert "cubicle serve (agent.model 'cubicle-task:ask-user'" in error
