"""The wheel's shipped files: what the commands read besides the code (pyproject.toml has the rest).

``cubicle image build``, ``up``, ``drill`` and ``run --task`` read ``images/`` (what guest images
are built from), ``tasks/``, and the guest agent's lock and sources.
In a checkout they are read where they are; a wheel carries copies of them in
``cubicle/_shipped/``, laid out as in the checkout (:mod:`cubicle.orchestrator.shipped` finds
them). An editable install reads the checkout itself and copies nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = (
    "images",
    "tasks",
    "requirements/guest.txt",
    "cubicle_guest/pyproject.toml",
    "cubicle_guest/*.py",
)
"""Checkout paths (globs) copied into ``cubicle/_shipped``; a folder is copied whole."""


class BuildWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "cubicle" / "_shipped"
        shutil.rmtree(target, ignore_errors=True)  # a build folder kept from an earlier build
        for pattern in SHIPPED:
            matched = sorted(ROOT.glob(pattern))
            if not matched:
                raise FileNotFoundError(f"setup.py: nothing in the checkout matches {pattern}")
            for source in matched:
                destination = target / source.relative_to(ROOT)
                destination.parent.mkdir(parents=True, exist_ok=True)
                if source.is_dir():
                    shutil.copytree(
                        source, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                    )
                else:
                    shutil.copy2(source, destination)


setup(cmdclass={"build_py": BuildWithShippedFiles})
