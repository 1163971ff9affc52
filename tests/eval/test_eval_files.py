"""``cubicle eval`` without sandboxes: what SUITE names, pass@k, the results file (a line cut
short by a crash), the summary and index, and the command's refusals — a mismatched
``--resume`` named, a finished suite resumed exits 0 and appends nothing."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from cubicle.orchestrator.drill.runner import stale_screenshots_check
from cubicle.orchestrator.eval.attempt import PLAYER_CHECKS, verdict_of
from cubicle.orchestrator.eval.results import (
    MANIFEST,
    RESULTS,
    AttemptRecord,
    Manifest,
    ResultsFile,
    latest,
)
from cubicle.orchestrator.eval.suite import SuiteError, load_suite
from cubicle.orchestrator.eval.summary import pass_at_k, score, summary_table, write_index
from cubicle.orchestrator.modelrun.run import RunResult
from cubicle.orchestrator.modelrun.verify import Check
from cubicle.orchestrator.tasks import TASKS_DIR, shipped_tasks
from tests.support.cli import REPO, run_cli

TASK = """
name = "{name}"
prompt = "Write {{WORKDIR}}/x.txt."
[[checks]]
file = "{{WORKDIR}}/x.txt"
equals = "x"
"""


def _task(folder: Path, name: str, file: str | None = None) -> Path:
    path = folder / (file or f"{name}.toml")
    path.write_text(TASK.format(name=name), "utf-8")
    return path


def test_the_tasks_folder_is_every_shipped_task_exactly_once() -> None:
    suite = load_suite(REPO / "tasks")
    assert suite.names == sorted(t.name for t in shipped_tasks())
    assert len(set(suite.names)) == len(suite.names) >= 5
    assert suite.source == TASKS_DIR.resolve()


def test_a_list_file_names_paths_and_shipped_tasks(tmp_path: Path) -> None:
    (tmp_path / "more").mkdir()
    _task(tmp_path / "more", "mine")
    listing = tmp_path / "suite.txt"
    listing.write_text("# a comment\n\nmore/mine.toml\neditor-save  # shipped\n", "utf-8")
    assert load_suite(listing).names == ["mine", "editor-save"]


def test_a_folder_ignores_its_subfolders(tmp_path: Path) -> None:
    _task(tmp_path, "top")
    (tmp_path / "sub").mkdir()
    _task(tmp_path / "sub", "below")
    assert load_suite(tmp_path).names == ["top"]


@pytest.mark.parametrize(
    ("setup", "named"),
    [
        (lambda d: d / "missing", "no such folder or list file"),
        (lambda d: d, "holds no task files"),
        (lambda d: (d / "l.txt").write_text("# nothing\n") and d / "l.txt", "names no task"),
        (lambda d: (d / "l.txt").write_text("\nno-such-task\n") and d / "l.txt", "l.txt:2"),
        (lambda d: _task(d, "twin", "a.toml") and _task(d, "twin", "b.toml") and d, "'twin'"),
    ],
)
def test_a_bad_suite_is_refused_naming_what_is_wrong(
    tmp_path: Path, setup: object, named: str
) -> None:
    path = setup(tmp_path)  # type: ignore[operator]
    with pytest.raises(SuiteError, match=named.replace(".", r"\.")):
        load_suite(path)


def test_pass_at_k() -> None:
    assert pass_at_k(2, 0, 1) == 0.0
    assert pass_at_k(2, 2, 1) == 1.0
    assert pass_at_k(2, 1, 1) == pytest.approx(0.5)
    assert pass_at_k(2, 1, 2) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(1, 0, 3) == 0.0


def _record(task: str, attempt: int, verdict: str, **more: object) -> AttemptRecord:
    return AttemptRecord(task, attempt, verdict, **more)  # type: ignore[arg-type]


def test_a_line_cut_short_by_a_crash_is_dropped_and_the_next_record_starts_clean(
    tmp_path: Path,
) -> None:
    results = ResultsFile(tmp_path)
    results.append(_record("a", 1, "passed"))
    with (tmp_path / RESULTS).open("a") as file:
        file.write('{"task": "b", "attem')
    assert [r.key for r in results.read()] == [("a", 1)]
    results.append(_record("b", 1, "failed"))
    assert [r.key for r in results.read()] == [("a", 1), ("b", 1)]


def test_an_interrupted_record_never_counts_over_a_finished_one() -> None:
    records = [
        _record("a", 1, "interrupted"),
        _record("a", 1, "passed"),
        _record("b", 1, "failed"),
        _record("b", 1, "interrupted"),
        _record("c", 1, "interrupted"),
    ]
    counting = latest(records)
    assert {k: r.verdict for k, r in counting.items()} == {
        ("a", 1): "passed",
        ("b", 1): "failed",
        ("c", 1): "interrupted",
    }


def test_summary_and_index_score_and_link_every_attempt(tmp_path: Path) -> None:
    records = [
        _record("a", 1, "passed", seconds=3.0, report="a/attempt-1/report.html"),
        _record("a", 2, "failed", seconds=9.5, tokens=120, report="a/attempt-2/report.html"),
        _record("b", 1, "broken_task", seconds=1.0),
        _record("b", 2, "broken_task", seconds=1.0),
    ]
    scores = score(records, ["a", "b"], 2)
    assert (scores.passed, scores.attempts) == (1, 4)
    assert scores.pass_at(1) == pytest.approx(0.25)
    assert scores.pass_at(2) == pytest.approx(0.5)
    table = summary_table(scores)
    assert "total: 1/4 passed (pass rate 25%), pass@1 0.25, pass@2 0.50" in table
    assert "1 passed, 1 failed" in table and "2 broken_task" in table
    page = write_index(tmp_path, scores, "t").read_text("utf-8")
    assert '<a href="a/attempt-1/report.html">#1 passed</a>' in page
    assert '<a href="a/attempt-2/report.html">#2 failed</a>' in page
    slowest = page[page.index("Slowest") : page.index("Costliest")]
    assert slowest.index("#2 failed") < slowest.index("#1 passed")
    assert "120 tokens" in page[page.index("Costliest") :]


def _finished_eval(folder: Path, suite: Path, names: list[str]) -> None:
    folder.mkdir()
    Manifest(str(suite.resolve()), names, 2, "cubicle-idle", False, "docker", 900.0).write(folder)
    results = ResultsFile(folder)
    for attempt in (1, 2):
        for name in names:
            results.append(_record(name, attempt, "failed", seconds=1.0))


def test_resuming_a_finished_suite_exits_0_and_appends_nothing(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    _task(tmp_path / "suite", "one")
    _task(tmp_path / "suite", "two")
    _finished_eval(tmp_path / "out", tmp_path / "suite", ["one", "two"])
    before = (tmp_path / "out" / RESULTS).read_bytes()
    done = run_cli(
        "eval", str(tmp_path / "suite"), "--model", "cubicle-idle", "--attempts", "2",
        "--resume", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / RESULTS).read_bytes() == before
    assert "0 to run, 4 already finished" in done.stderr
    assert "total: 0/4 passed" in done.stdout
    assert (tmp_path / "out" / "index.html").is_file()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (["--attempts", "3"], "--attempts (the folder's run: 2, now: 3)"),
        (["--oracle"], "--oracle (the folder's run: False, now: True)"),
        (["--timeout", "60"], "--timeout"),
    ],
)
def test_resume_with_other_options_is_refused_by_name(
    tmp_path: Path, change: list[str], named: str
) -> None:
    (tmp_path / "suite").mkdir()
    _task(tmp_path / "suite", "one")
    _finished_eval(tmp_path / "out", tmp_path / "suite", ["one"])
    before = (tmp_path / "out" / RESULTS).read_bytes()
    options = {"--attempts": "2", "--model": "cubicle-idle"}
    if "--oracle" in change:
        options.pop("--model")
    args = [part for pair in options.items() for part in pair if pair[0] not in change]
    done = run_cli(
        "eval", str(tmp_path / "suite"), *args, *change, "--resume", str(tmp_path / "out")
    )
    assert done.returncode == 1
    assert "not the same eval" in done.stderr and named in done.stderr, done.stderr
    assert (tmp_path / "out" / RESULTS).read_bytes() == before


def test_resume_with_another_suite_is_refused_naming_suite(tmp_path: Path) -> None:
    for name in ("suite", "other"):
        (tmp_path / name).mkdir()
        _task(tmp_path / name, "one")
    _finished_eval(tmp_path / "out", tmp_path / "suite", ["one"])
    done = run_cli(
        "eval", str(tmp_path / "other"), "--model", "cubicle-idle", "--attempts", "2",
        "--resume", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 1
    assert "differs: SUITE (the folder's run:" in done.stderr, done.stderr


def test_out_holding_an_eval_is_refused_and_resume_needs_an_eval_folder(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    _task(tmp_path / "suite", "one")
    _finished_eval(tmp_path / "out", tmp_path / "suite", ["one"])
    done = run_cli("eval", str(tmp_path / "suite"), "--oracle", "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "already holds an eval" in done.stderr
    assert f"--resume {tmp_path / 'out'}" in done.stderr
    done = run_cli("eval", str(tmp_path / "suite"), "--oracle", "--resume", str(tmp_path))
    assert done.returncode == 1 and f"no {MANIFEST} there" in done.stderr


def test_a_real_model_without_a_key_and_bad_counts_are_refused(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    _task(tmp_path / "suite", "one")
    done = run_cli(
        "eval", str(tmp_path / "suite"), "--model", "gpt-x", "--out", str(tmp_path / "o"),
        env={"OPENAI_API_KEY": ""},
    )  # fmt: skip
    assert done.returncode == 1 and "--model gpt-x needs OPENAI_API_KEY" in done.stderr
    done = run_cli("eval", str(tmp_path / "suite"), "--oracle", "--parallel", "0")
    assert done.returncode == 1 and "--parallel must be at least 1, got 0" in done.stderr
    assert not (tmp_path / "o").exists()


def test_records_round_trip_and_bad_verdicts_are_refused(tmp_path: Path) -> None:
    record = _record("a", 1, "timeout", checks=[{"name": "c", "ok": False, "detail": "d"}])
    assert AttemptRecord.from_json(json.loads(json.dumps(asdict(record)))) == record
    (tmp_path / RESULTS).write_text('{"task": "a", "attempt": 1, "verdict": "great"}\n')
    with pytest.raises(ValueError, match=r"results.jsonl:1: not an attempt record.*'great'"):
        ResultsFile(tmp_path).read()


def test_the_scripted_players_own_check_does_not_decide_the_verdict(tmp_path: Path) -> None:
    stale = SimpleNamespace(stale=1, checked=4, window_s=3.0)
    own = stale_screenshots_check(stale)  # type: ignore[arg-type]
    assert own.name in PLAYER_CHECKS and not own.ok
    task_check = Check("the file", True, "x", "x")
    result = RunResult(out=tmp_path, checks=[task_check, own], require_checks=True)
    assert not result.ok
    assert (
        verdict_of(result, oracle=True, sandbox_failed=False, cancelled=False, timed_out=False)
        == "passed"
    )
    result.checks = [own]
    assert (
        verdict_of(result, oracle=True, sandbox_failed=False, cancelled=False, timed_out=False)
        == "broken_task"
    ), "the player's check alone proves nothing"
    result.checks = [Check("the file", False, "x", "y")]
    for oracle, verdict in ((True, "broken_task"), (False, "failed")):
        assert (
            verdict_of(
                result, oracle=oracle, sandbox_failed=False, cancelled=False, timed_out=False
            )
            == verdict
        )
    result.error = "APIConnectionError: Connection error."
    assert (
        verdict_of(result, oracle=False, sandbox_failed=False, cancelled=False, timed_out=False)
        == "model_error"
    )
    assert (
        verdict_of(result, oracle=False, sandbox_failed=True, cancelled=False, timed_out=False)
        == "sandbox_error"
    )
    assert (
        verdict_of(result, oracle=False, sandbox_failed=True, cancelled=False, timed_out=True)
        == "timeout"
    )
    assert (
        verdict_of(result, oracle=False, sandbox_failed=True, cancelled=True, timed_out=True)
        == "interrupted"
    )


def test_a_sandbox_error_is_tried_once_more_and_recorded_once(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    _task(tmp_path / "suite", "one")
    done = run_cli(
        "eval", str(tmp_path / "suite"), "--model", "cubicle-idle", "--out", str(tmp_path / "o"),
        env={"CUBICLE_DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("sandbox error (EngineUnavailable") == 1, done.stderr
    [record] = ResultsFile(tmp_path / "o").read()
    assert (record.verdict, record.sandbox_retries, record.attempt) == ("sandbox_error", 1, 1)
    assert record.error is not None and "no-engine.sock" in record.error


def test_engines_are_checked_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    _task(tmp_path / "suite", "one")
    out = tmp_path / "o"
    done = run_cli(
        "eval", str(tmp_path / "suite"), "--oracle", "--engine", "http://x", "--out", str(out)
    )
    assert done.returncode == 1 and "Docker engine 'http://x': the scheme must be" in done.stderr
    done = run_cli(
        "eval", str(tmp_path / "suite"), "--oracle", "--backend", "vm", "--engine", "local",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 1 and "--engine is for --backend docker, not vm" in done.stderr
    assert not out.exists()
