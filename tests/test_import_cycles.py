"""No import cycle between the project's modules (cubicle/, cubicle_guest/).

Every ``import``/``from … import`` counts, wherever it is written: at module level, under
``if TYPE_CHECKING:`` and inside functions (a lazy import is still a dependency of the design).
``from package import name`` depends on ``package.name`` when that is a module, else on
``package``; the implicit import of a parent package's ``__init__`` does not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from cubicle.orchestrator.tasks import shipped_tasks

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cubicle", "cubicle_guest")
KNOWN_CYCLES: list[set[str]] = []
"""Cycles tolerated for now, each with the follow-up that removes it."""


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO).with_suffix("")
            folders = relative.parts[:-1]
            if any(part.startswith(".") or part in ("build", "dist") for part in folders):
                continue
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def import_graph() -> dict[str, set[str]]:
    """Project module → the project modules it imports."""
    known = _modules()
    return {
        module: {target for target in _imports(module, path, known) if target in known} - {module}
        for module, path in known.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_checker_finds_a_cycle_through_type_checking_and_function_imports(
    tmp_path: Path,
) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.other import X\n"
        "def f():\n    import pkg.third\n"
        "from pkg import sub\n"
    )
    known = {"pkg.m": source, "pkg.other": source, "pkg.third": source, "pkg.sub": source}
    assert set(_imports("pkg.m", source, known)) == {
        "typing",
        "pkg.other",
        "pkg.third",
        "pkg.sub",
    }


def test_no_import_cycle_between_project_modules() -> None:
    graph = import_graph()
    assert "cubicle.orchestrator.providers.vm.provider" in graph  # the walk sees the subpackages
    found = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


RUN = "cubicle.orchestrator.run_task"
DRILL = "cubicle.orchestrator.drill"
SHARED = "cubicle.orchestrator.modelrun"


def _in(package: str, module: str) -> bool:
    return module == package or module.startswith(package + ".")


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), set()) - seen:
            seen.add(target)
            todo.append(target)
    return seen


def run_and_drill_problems(graph: dict[str, set[str]]) -> list[str]:
    """How ``cubicle run`` (:data:`RUN`) and the drill (:data:`DRILL` and its modules) reach each
    other, directly or transitively, or the shared :data:`SHARED` package reaches either."""
    problems = [f"{RUN} reaches {m}" for m in sorted(reachable(graph, RUN)) if _in(DRILL, m)]
    problems += [
        f"{m} reaches {RUN}" for m in sorted(graph) if _in(DRILL, m) and RUN in reachable(graph, m)
    ]
    for module in sorted(m for m in graph if _in(SHARED, m)):
        problems += [
            f"{module} reaches {m}"
            for m in sorted(reachable(graph, module))
            if m == RUN or _in(DRILL, m)
        ]
    return problems


def test_the_separation_check_finds_run_and_drill_importing_each_other() -> None:
    # the layout before the shared package: run_task imported the drill's session module and
    # the drill's cli imported run_task (for its register_run)
    graph = {
        RUN: {"cubicle.orchestrator.drill.session"},
        "cubicle.orchestrator.drill.session": {"cubicle.orchestrator.trajectory.recorder"},
        "cubicle.orchestrator.drill.cli": {RUN, "cubicle.orchestrator.drill.session"},
        "cubicle.orchestrator.trajectory.recorder": set(),
        SHARED + ".loop": {"cubicle.orchestrator.view.x"},
        "cubicle.orchestrator.view.x": {
            "cubicle.orchestrator.drill.runner"
        },  # transitively, lazily or not
        "cubicle.orchestrator.drill.runner": set(),
    }
    assert run_and_drill_problems(graph) == [
        f"{RUN} reaches cubicle.orchestrator.drill.session",
        f"cubicle.orchestrator.drill.cli reaches {RUN}",
        f"{SHARED}.loop reaches cubicle.orchestrator.drill.runner",
    ]


def test_cubicle_run_and_the_drill_share_a_package_and_import_neither_other() -> None:
    graph = import_graph()
    assert run_and_drill_problems(graph) == []
    assert (
        RUN in graph and "cubicle.orchestrator.drill.runner" in graph and SHARED + ".loop" in graph
    )


def test_no_shipped_task_verifier_lives_in_the_drill_or_cubicle_run() -> None:
    """A task's ``verifier = "module:function"`` is imported at run time by both commands."""
    verifiers = [c.verifier for t in shipped_tasks() for c in t.checks if c.verifier]
    assert verifiers, "a shipped task has a Python verifier"
    modules = {v.partition(":")[0] for v in verifiers}
    assert {m for m in modules if m == RUN or _in(DRILL, m)} == set()
