"""Choosing a provider: the task files' ``provider``/``model`` and provider scripts, the drill's
and ``cubicle run``'s ``--provider``/``--loop`` (refused with the provider's loops named, the
provider's key variable named when unset), the provider scripts' validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubicle.drivers.errors import ScriptError
from cubicle.orchestrator.cli import main
from cubicle.orchestrator.drill.cli import provider_table
from cubicle.orchestrator.drill.provider_scripts import parse_provider_script
from cubicle.orchestrator.drill.runner import DrillResult
from cubicle.orchestrator.drill.stale import StaleCheck
from cubicle.orchestrator.modelrun.loop import LoopKind
from cubicle.orchestrator.modelrun.model_providers import PROVIDER_LOOPS
from cubicle.orchestrator.modelrun.verify import Check
from cubicle.orchestrator.tasks import TaskFileError, fill, load_task, parse_task
from tests.support.cli import run_cli


def test_the_desktop_task_has_a_script_for_every_provider_typing_what_its_checks_expect() -> None:
    task = load_task("desktop")
    values = task.placeholders("/home/cubicle")
    note = task.checks[0].equals
    form = task.checks[1].form
    assert note is not None and form is not None
    for provider in ("anthropic", "gemini"):
        script = parse_provider_script(fill(task.script(provider), values), provider)
        texts = [
            call[1].get("text")
            for turn in script.turns
            for call in turn.calls or ()
            if call[0] in ("type", "type_text_at")
        ]
        assert note in texts and all(value in texts for value in form.values()), provider
        assert not any(len(call) > 2 for turn in script.turns for call in turn.calls or ())
        assert script.turns[-1].message and all(t.sees for t in script.turns[1:-1][1:])


def test_a_task_without_a_providers_script_is_refused_naming_what_it_has() -> None:
    task = load_task("editor-save")
    with pytest.raises(TaskFileError, match=r"no gemini script .* scripts for: openai"):
        task.script("gemini")
    assert main(["drill", "--provider", "gemini", "--task", "editor-save"]) != 0


def test_a_task_file_names_its_provider_and_model_and_a_wrong_one_is_refused(
    tmp_path: Path,
) -> None:
    data = {"prompt": "p", "provider": "anthropic", "model": "claude-x"}
    task = parse_task(data, source=tmp_path / "t.toml", default_name="t")
    assert (task.provider, task.model) == ("anthropic", "claude-x")
    with pytest.raises(TaskFileError, match="provider"):
        parse_task({"prompt": "p", "provider": "mistral"}, source=None, default_name="t")


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ({"name": "s", "turns": ["x"]}, "turn 0: a turn must be an object"),
        ({"name": "s", "turns": [{"calls": [["click"]]}, {"message": "m"}]}, r"calls\[0\] must be"),
        ({"name": "s", "turns": [{"calls": [["k", {}, "boom"]]}]}, "third item must be 'error'"),
        ({"name": "s", "turns": [{"message": "m"}, {"message": "m"}]}, "only the last turn"),
        ({"name": "s", "turns": [{"calls": [["k", {}]]}]}, "the last turn must be a message"),
        ({"name": "s", "turns": [{"calls": [["k", {}]], "see": []}]}, "unknown key 'see'"),
        ({"name": "s", "turns": [{"sees": [], "message": "m"}]}, "first turn"),
    ],
)
def test_a_malformed_provider_script_is_refused_naming_the_turn_and_field(
    script: dict[str, object], error: str
) -> None:
    with pytest.raises(ScriptError, match=error):
        parse_provider_script(script, "x.json")


def test_drill_help_lists_the_loops_of_every_provider(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["drill", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for provider, loops in PROVIDER_LOOPS.items():
        assert f"{provider}: {', '.join(loops)}" in text


def test_a_loop_the_provider_lacks_is_refused_naming_its_loops(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["drill", "--provider", "anthropic", "--loop", "runner"]) != 0
    assert "the anthropic provider has the loops tool_runner" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("provider", "variables"),
    [("anthropic", "ANTHROPIC_API_KEY"), ("gemini", "GEMINI_API_KEY or GOOGLE_API_KEY")],
)
def test_run_without_the_providers_key_names_its_variable(provider: str, variables: str) -> None:
    unset = {"ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"}
    result = run_cli("run", "x", "--provider", provider, timeout=60, unset=unset)
    assert result.returncode == 1
    assert f"{variables} is not set" in result.stderr
    assert f"cubicle drill --provider {provider}" in result.stderr


def test_the_conformance_table_has_a_column_per_provider(tmp_path: Path) -> None:
    def result(task: str, provider: str, loop: LoopKind, ok: bool) -> DrillResult:
        stale = StaleCheck.__new__(StaleCheck)
        stale.stale, stale.checked = (0 if ok else 1), 9
        return DrillResult(
            out=tmp_path,
            task=task,
            provider=provider,  # type: ignore[arg-type]
            loop=loop,
            error=None if ok else "boom",
            checks=[Check("c", True, 1, 1, "")],
            stale_check=stale,
        )

    table = provider_table(
        [
            result("desktop", "openai", "toolset", True),
            result("desktop", "openai", "runner", True),
            result("desktop", "anthropic", "tool_runner", True),
            result("desktop", "gemini", "generate_content", False),
            result("editor-save", "openai", "toolset", True),
        ]
    )
    lines = [line.split() for line in table.splitlines()]
    assert lines[0] == ["task", "openai", "anthropic", "gemini"]
    assert " ".join(lines[1]) == (
        "desktop PASSED 2/2 stale 0/18 PASSED 1/1 stale 0/9 FAILED 0/1 stale 1/9"
    )
    assert lines[2] == ["editor-save", "PASSED", "1/1", "stale", "0/9", "-", "-"]


def test_provider_all_takes_no_loop(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "--provider", "all", "--loop", "runner"]) != 0
    assert "--provider all runs every provider's loops" in capsys.readouterr().err
