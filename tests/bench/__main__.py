"""`make bench`: run every benchmark module and print medians and ratios (ours vs peers).

Each module in this package exposing ``run(report: Report) -> None`` is run in turn; a module
whose prerequisites are missing reports why and is skipped. Absolute times on shared machines
are noise: read the ratios, which come from one run with both paths side by side.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import tests.bench as package
from tests.bench.report import Report


def main(argv: list[str]) -> int:
    only = set(argv)
    report = Report()
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not module_info.name.startswith("bench_"):
            continue
        if only and module_info.name not in only:
            continue
        module = importlib.import_module(f"tests.bench.{module_info.name}")
        report.section(module_info.name, (module.__doc__ or "").strip().splitlines()[0:1])
        try:
            module.run(report)
        except report.Skip as skip:
            report.line(f"skipped: {skip}")
    report.summary()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
