"""Layers that only point down: every import of the project goes to its own layer or one below.

The layers are declared once, here (:data:`LAYERS`, lowest first). A *unit* is a package folder
(all its modules together: ``cubicle.orchestrator.pool``, ``cubicle.drivers``, ``cubicle_guest``)
or, for the orchestrator's core, one top-level module (``cubicle.orchestrator.sandbox``). Every
unit sits in exactly one layer; an import from a unit to a unit of a higher layer fails, naming
both modules; and the graph of units has no cycle (the modules' own cycle check is
tests/test_import_cycles.py). Imports are read from the source files as that test reads them:
every ``import`` counts, lazy, under ``TYPE_CHECKING`` or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.test_import_cycles import REPO, cycles, import_graph

CORE = "cubicle.orchestrator"
LAYERS: Sequence[tuple[str, frozenset[str]]] = (
    ("the guest agent", frozenset({"cubicle_guest"})),
    ("the egress proxy and the origin grammar", frozenset({"cubicle.egress"})),
    ("the drivers", frozenset({"cubicle.drivers", "cubicle.drivers.scripted_model"})),
    (
        "the orchestrator's core",
        frozenset(
            f"{CORE}.{name}".rstrip(".")
            for name in (
                "",  # the package itself: its version, which the labels carry
                "errors",
                "shipped",
                "hostdirs",
                "hostprocs",
                "labels",
                "resume_marks",
                "ownership",
                "desktop",
                "tasks",
                "harbor",
                "harbor_export",
                "trajectory",
                "network",
                "provider",
                "claims",
                "pool_marks",
                "readiness",
                "view_servers",
                "page_security",
                "file_transfer",
            )
        ),
    ),
    (
        "the providers",
        frozenset({f"{CORE}.providers", f"{CORE}.providers.docker", f"{CORE}.providers.vm"}),
    ),
    (
        "sandboxes",
        frozenset(
            f"{CORE}.{name}"
            for name in ("sandbox", "origin_questions", "origin_answers", "shape_options")
        ),
    ),
    (
        "pools, the live view, the model loop",
        frozenset(
            f"{CORE}.{name}" for name in ("pool", "view", "modelrun", "modelrun.guest_files")
        ),
    ),
    (
        "runs, the drill, serve",
        frozenset(
            f"{CORE}.{name}" for name in ("run_task", "agents_run", "drill", "eval", "serve", "mcp")
        ),
    ),
    ("the command line", frozenset({f"{CORE}.cli", f"{CORE}.files_cli"})),
    ("the public API", frozenset({"cubicle"})),
)
"""Lowest first. A unit may import its own layer's units and any lower layer's."""


def unit_of(module: str) -> str:
    """The unit ``module`` belongs to: the orchestrator's top-level modules are one unit each;
    any other module belongs to its package folder (a package's ``__init__`` to the package)."""
    parts = module.split(".")
    path = REPO.joinpath(*parts)
    if path.is_dir():
        return module
    package = ".".join(parts[:-1])
    return module if package == CORE else package


def layer_index(layers: Sequence[tuple[str, frozenset[str]]]) -> dict[str, int]:
    return {unit: index for index, (_, units) in enumerate(layers) for unit in units}


def upward_imports(
    graph: Mapping[str, set[str]], layers: Sequence[tuple[str, frozenset[str]]]
) -> list[str]:
    """Each import from a lower layer's module to a higher layer's, as ``a (layer) imports b
    (layer)``; a module whose unit is in no layer is named too."""
    index = layer_index(layers)
    problems = [
        f"{module}: its unit {unit_of(module)} is in no layer (add it to LAYERS)"
        for module in sorted(graph)
        if unit_of(module) not in index
    ]
    for module in sorted(graph):
        here = index.get(unit_of(module))
        for target in sorted(graph[module]):
            there = index.get(unit_of(target))
            if here is not None and there is not None and there > here:
                problems.append(
                    f"{module} ({layers[here][0]}) imports {target} ({layers[there][0]}), "
                    "a higher layer"
                )
    return problems


def unit_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = units.setdefault(unit_of(module), set())
        edges.update(unit_of(t) for t in targets if unit_of(t) != unit_of(module))
    return units


def test_every_import_points_down_or_sideways() -> None:
    graph = import_graph()
    assert f"{CORE}.providers.vm.provider" in graph and "cubicle_guest.client" in graph
    assert upward_imports(graph, LAYERS) == []


def test_the_units_import_each_other_in_no_cycle() -> None:
    found = cycles(unit_graph(import_graph()))
    assert found == [], "unit cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)


def test_each_unit_is_in_one_layer_and_every_layer_is_used() -> None:
    seen: dict[str, str] = {}
    for name, units in LAYERS:
        for unit in units:
            assert unit not in seen, f"{unit} is in {seen[unit]} and {name}"
            seen[unit] = name
    assert set(seen) == {unit_of(m) for m in import_graph()}


def test_a_planted_upward_import_fails_naming_both_modules(tmp_path: Path) -> None:
    """The check on the real graph plus one planted import: the Docker provider importing the
    pool (the arrow this test was written to keep out), and the drivers importing the CLI."""
    graph = {module: set(targets) for module, targets in import_graph().items()}
    graph[f"{CORE}.providers.docker.provider"].add(f"{CORE}.pool.registry")
    graph["cubicle.drivers.policy_file"].add(f"{CORE}.cli")
    assert upward_imports(graph, LAYERS) == [
        f"cubicle.drivers.policy_file (the drivers) imports {CORE}.cli (the command line), "
        "a higher layer",
        f"{CORE}.providers.docker.provider (the providers) imports {CORE}.pool.registry "
        "(pools, the live view, the model loop), a higher layer",
    ]
    graph[f"{CORE}.brand_new"] = set()
    assert upward_imports(graph, LAYERS)[0] == (
        f"{CORE}.brand_new: its unit {CORE}.brand_new is in no layer (add it to LAYERS)"
    )


def test_a_planted_unit_cycle_is_found() -> None:
    graph = {module: set(targets) for module, targets in import_graph().items()}
    graph["cubicle_guest.client"].add("cubicle.drivers.computer")
    # the cycle runs through every unit between them (the egress proxy imports the guest's
    # stream format, and the drivers import the origin grammar)
    assert any({"cubicle_guest", "cubicle.drivers"} <= cycle for cycle in cycles(unit_graph(graph)))
