"""Every fenced code block of README.md and docs/*.md is checked as what it is, or the test fails.

A block's kind is its language's default, or the HTML comment on the line before its fence,
``<!-- example: KIND [why] -->``:

- ``python`` (default for ``python``): run as printed, a script in a process of its own;
- ``typecheck`` (python that needs a model, a key or a long-lived sandbox): every import is
  executed and the block passes ``mypy --strict`` (with every other python block);
- ``run by tests/FILE.py::FUNCTION`` (python run for real by that test, e.g. against Docker):
  ``FUNCTION()`` must return exactly this block, and the block is type-checked too;
- ``shell`` (default for ``sh``, ``bash``, ``console``; in ``console`` only the ``$ `` lines):
  each ``cubicle`` command is parsed by the real argument parser and its values by the parsers
  the command uses; ``make TARGET`` must name a Makefile target; ``export NAME=…`` must name a
  variable cubicle or the Docker client reads; ``source .venv/bin/activate`` the Makefile's venv;
- ``synopsis`` (the CLI at a glance): every subcommand, flag and listed choice exists;
- ``task`` / ``policy`` / ``prices`` (TOML): parsed by the loader of task files / approval policy
  files / ``cubicle serve --prices`` tables;
- ``output``, ``diagram``, ``illustration WHY``: not code (what a command prints, a picture, a
  design's sketch of an API cubicle does not depend on); python ones must still compile.

A block of any other language or kind fails the test, so none is left unchecked by accident.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import io
import re
import shlex
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cubicle.drivers.policy_file import parse_policy
from cubicle.orchestrator.cli import build_parser
from cubicle.orchestrator.provider import parse_size
from cubicle.orchestrator.providers.docker.engine import TLS_FILES, Engine
from cubicle.orchestrator.run_task import parse_settle, parse_verify_file
from cubicle.orchestrator.serve.spend import parse_prices
from cubicle.orchestrator.shape_options import parse_network
from cubicle.orchestrator.tasks import TaskFileError, parse_task
from cubicle.orchestrator.view.recording import parse_record

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```|~~~)(?P<lang>[\w+-]*)[ \t]*$")
ANNOTATION = re.compile(r"^\s*<!--\s*example:\s*(?P<kind>.+?)\s*-->\s*$")
DEFAULT_KIND = {"python": "python", "sh": "shell", "bash": "shell", "console": "shell"}
NOT_CODE = ("output", "diagram", "illustration")
TYPECHECKED = ("python", "typecheck", "run")
PYTHON_TIMEOUT_S = 60
FLAG = re.compile(r"(?<![\w-])(--?[a-z][\w-]*)(?:[ =]([^\s\]]+))?")
"""A synopsis's ``--flag`` or ``-f``, with the word after it (a value, or ``A|B`` choices)."""


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its kind (see the module docstring)."""

    page: Path
    line: int
    """The line of its opening fence (1-based)."""
    lang: str
    kind: str
    """The annotation's first word, or the language's default (``""``: none)."""
    detail: str
    """The rest of the annotation."""
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO).as_posix()}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order.

    :raises AssertionError: a fence that is never closed.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        closing = re.compile(rf"^ *{re.escape(opening['fence'])}[ \t]*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        assert end < len(lines), f"{page.name}:{index + 1}: the code block is never closed"
        before = next((line for line in reversed(lines[:index]) if line.strip()), "")
        note = ANNOTATION.match(before)
        kind, _, detail = (note["kind"] if note else "").partition(" ")
        lang = opening["lang"]
        indent = len(opening["indent"])
        code = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        found.append(Block(page, index + 1, lang, kind or DEFAULT_KIND.get(lang, ""), detail, code))
        index = end + 1
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def _ids(block: Block) -> str:
    return block.where


# --------------------------------------------------------------------------- python


def _imports(code: str) -> str:
    """The block's import statements, alone."""
    tree = ast.parse(code)
    nodes = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    return "\n".join(ast.unparse(node) for node in nodes)


def check_python(block: Block) -> None:
    """Run the block as a script of its own (a block that would outlive its timeout, e.g. one
    waiting on a sandbox, fails here: mark it ``typecheck`` or ``run by``)."""
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=PYTHON_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{block.where}: exit {done.returncode}\n{done.stderr}"


def check_imports(block: Block) -> None:
    """The names a block imports exist (the rest is mypy's: see test_python_blocks_type_check)."""
    exec(compile(_imports(block.code), block.where, "exec"), {"__name__": "docs_example"})


def check_run_by(block: Block) -> None:
    """``run by tests/FILE.py::FUNCTION``: that test extracts exactly this block to run it."""
    path, _, function = block.detail.removeprefix("by ").partition("::")
    assert block.detail.startswith("by ") and path.endswith(".py") and function, (
        f"{block.where}: write <!-- example: run by tests/FILE.py::FUNCTION -->"
    )
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    extract: Callable[[], str] = getattr(module, function)
    assert extract() == block.code, f"{block.where}: {path}::{function} runs another block"
    check_imports(block)


def check_compiles(block: Block) -> None:
    if block.lang == "python":
        compile(block.code, block.where, "exec")
    assert block.detail or block.kind != "illustration", (
        f"{block.where}: say why it is only an illustration"
    )


# --------------------------------------------------------------------------- shell


@cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([\w.-]+):", text, re.M))


@cache
def cubicle_sources() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in (REPO / "cubicle").rglob("*.py"))


def parse_engine(url: str) -> Engine:
    """``--engine URL``'s scheme, host and port (a ``tcp://`` engine's TLS files are the
    reader's: empty stand-ins here)."""
    with tempfile.TemporaryDirectory() as certs:
        for name in TLS_FILES:
            (Path(certs) / name).touch()
        return Engine.parse(url, cert_path=certs)


def parse_cubicle(argv: list[str], where: str) -> argparse.Namespace:
    """``argv`` (after ``cubicle``) through the real parser, then the values it leaves as text
    through the parsers the command applies to them.

    :raises AssertionError: naming the command and what argparse or the value's parser said.
    """
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = build_parser().parse_args(argv)
    except SystemExit:
        raise AssertionError(
            f"{where}: cubicle {shlex.join(argv)}: {stderr.getvalue().strip()}"
        ) from None
    values: dict[str, Callable[[Any], object]] = {
        "network": parse_network,
        "size": parse_size,
        "view": parse_size,
        "settle": parse_settle,
        "record": parse_record,
        "engine": parse_engine,
    }
    for name, parse in values.items():
        value = getattr(args, name, None)
        if isinstance(value, str):
            try:
                parse(value)
            except (ValueError, argparse.ArgumentTypeError, Exception) as exc:
                raise AssertionError(
                    f"{where}: cubicle {shlex.join(argv)}: {name} {value!r}: {exc}"
                ) from None
    for value in getattr(args, "verify_file", None) or []:
        parse_verify_file(value)
    return args


def shell_commands(block: Block) -> Iterator[list[str]]:
    """The argv of every command of a shell block (``NAME=$(…)`` yields the inner command)."""
    lines = block.code.replace("\\\n", " ").splitlines()
    if block.lang == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    for line in lines:
        substituted = re.match(r"\s*\w+=\$\((?P<inner>[^)]*)\)(?P<rest>.*)$", line)
        command = substituted["inner"] + substituted["rest"] if substituted else line
        argv = shlex.split(command, comments=True)
        if argv:
            yield argv


def check_shell(block: Block) -> None:
    checked = 0
    for argv in shell_commands(block):
        command, *rest = argv
        where = f"{block.where}: {shlex.join(argv)}"
        if command == "cubicle":
            parse_cubicle(rest, block.where)
        elif command == "make":
            assert rest and set(rest) <= make_targets(), f"{where}: no such Makefile target"
        elif command == "export":
            for assignment in rest:
                name = assignment.partition("=")[0]
                assert re.search(rf"\b{name}\b", cubicle_sources()), (
                    f"{where}: nothing in cubicle/ reads {name}"
                )
        elif command == "source":
            venv = re.search(r"^VENV \?= (\S+)", (REPO / "Makefile").read_text(), re.M)
            assert venv and rest == [f"{venv[1]}/bin/activate"], f"{where}: not the Makefile's venv"
        else:
            raise AssertionError(f"{where}: no check for {command!r} commands (see this test)")
        checked += 1
    assert checked, f"{block.where}: a shell block without commands (an output block?)"


# --------------------------------------------------------------------------- synopsis


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices
            return choices
    return {}


def synopsis_commands(block: Block) -> list[str]:
    """The commands of a synopsis: ``cubicle …`` lines, indented lines continuing them, and
    ``A | cubicle B`` as two; without comments and without what follows ``--``."""
    entries: list[str] = []
    for line in block.code.splitlines():
        if line.startswith("cubicle "):
            entries.append(line)
        elif line.strip():
            assert entries and line.startswith(" "), f"{block.where}: {line!r} is no entry"
            entries[-1] += " " + line.strip()
    assert entries, f"{block.where}: no cubicle command in the synopsis"
    return [
        alternative.split(" -- ", 1)[0]  # what follows is the guest's argv
        for entry in entries
        for alternative in re.split(r"\s\|\s(?=cubicle )", entry.split("  #", 1)[0])
    ]


def subcommand(command: str, where: str) -> tuple[str, argparse.ArgumentParser]:
    """The subcommand a synopsis command names (``cubicle pool fill``) and its parser."""
    words = command.split()[1:]
    parser, path = build_parser(), ["cubicle"]
    while words and words[0] in _subparsers(parser):
        path.append(words[0])
        parser = _subparsers(parser)[words.pop(0)]
    assert len(path) > 1, f"{where}: {command!r}: no such subcommand"
    return " ".join(path), parser


def leaf_subcommands(parser: argparse.ArgumentParser, path: str = "cubicle") -> set[str]:
    """Every runnable subcommand of ``parser`` (``cubicle image build``, not ``cubicle image``)."""
    children = _subparsers(parser)
    if not children:
        return {path}
    return {
        leaf for name, sub in children.items() for leaf in leaf_subcommands(sub, f"{path} {name}")
    }


def check_synopsis(block: Block) -> None:
    """Each subcommand exists, each ``--flag``/``-x`` is one of its options, and each ``A|B``
    after a flag with choices names only valid choices."""
    for command in synopsis_commands(block):
        path, parser = subcommand(command, block.where)
        options = {option: action for action in parser._actions for option in action.option_strings}
        for flag, value in FLAG.findall(command):
            where = f"{block.where}: {path} {flag}"
            assert flag in options, f"{where}: no such option"
            choices = options[flag].choices
            if value and "|" in value and choices is not None:
                listed = set(value.split("|"))
                assert listed <= set(choices), f"{where}: {listed - set(choices)} not choices"


def test_the_synopsis_names_every_subcommand() -> None:
    """The CLI at a glance is whole: a new subcommand is added to it, or the test fails."""
    synopses = [block for block in ALL if block.kind == "synopsis"]
    named = {subcommand(c, b.where)[0] for b in synopses for c in synopsis_commands(b)}
    missing = sorted(leaf_subcommands(build_parser()) - named)
    assert synopses and not missing, f"no synopsis (README's CLI at a glance) names {missing}"


# --------------------------------------------------------------------------- TOML


def check_task(block: Block) -> None:
    try:
        parse_task(tomllib.loads(block.code), source=None, default_name="docs-example")
    except (TaskFileError, tomllib.TOMLDecodeError) as exc:
        raise AssertionError(f"{block.where}: {exc}") from None


def check_policy(block: Block) -> None:
    parse_policy(block.code, block.where)


def check_prices(block: Block) -> None:
    parse_prices(block.code, block.where)


CHECKS: dict[str, Callable[[Block], None]] = {
    "python": check_python,
    "typecheck": check_imports,
    "run": check_run_by,
    "shell": check_shell,
    "synopsis": check_synopsis,
    "task": check_task,
    "policy": check_policy,
    "prices": check_prices,
    **dict.fromkeys(NOT_CODE, check_compiles),
}
LANGUAGES: dict[str, tuple[str, ...]] = {
    "python": ("python", "typecheck", "run", "illustration"),
    "sh": ("shell",),
    "bash": ("shell",),
    "console": ("shell",),
    "toml": ("task", "policy", "prices"),
    "text": ("synopsis", *NOT_CODE),
    "yaml": ("illustration",),
}


def test_the_pages_have_code_blocks() -> None:
    assert len(ALL) >= 15 and {block.lang for block in ALL} >= {"python", "sh", "toml"}


@pytest.mark.parametrize("block", ALL, ids=_ids)
def test_every_block_is_checked_as_what_it_is(block: Block) -> None:
    allowed = LANGUAGES.get(block.lang, ())
    assert block.kind in allowed, (
        f"{block.where}: a ```{block.lang} block of kind {block.kind or 'none'!r}: this test "
        f"checks {', '.join(allowed) or 'no kind'} for that language; annotate the line before "
        "the fence with <!-- example: KIND --> (see tests/test_docs_examples.py)"
    )
    CHECKS[block.kind](block)


def test_python_blocks_type_check(tmp_path: Path) -> None:
    """Every python block that is code passes ``mypy --strict`` (the project's configuration)."""
    typed = [block for block in ALL if block.lang == "python" and block.kind in TYPECHECKED]
    files: dict[str, Block] = {}
    for block in typed:
        name = re.sub(r"\W", "_", block.where.removesuffix(".md").replace(".md:", "_")).lower()
        path = tmp_path / f"docs_{name}.py"
        path.write_text(block.code, encoding="utf-8")
        files[str(path)] = block
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--strict", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    report = done.stdout
    for file, block in files.items():  # the page's own line numbers
        for found in re.findall(rf"^{re.escape(file)}:(\d+):", report, re.M):
            report = report.replace(
                f"{file}:{found}:", f"{block.page.name}:{block.line + int(found)}:"
            )
    assert done.returncode == 0, f"mypy on the docs' python blocks:\n{report}"
