"""The built wheel, installed into a fresh venv outside the checkout, is a whole cubicle.

Its top-level import names are ``cubicle`` and ``cubicle_guest`` only; ``import cubicle`` there
loads the installed copy (not this checkout); the files the commands read besides the code
(``images/``, ``tasks/``, the guest's lock and sources: :mod:`cubicle.orchestrator.shipped`) are
in it, byte for byte, so the image it would build is the one this checkout builds; and
``cubicle drill`` from that venv passes on the Docker backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle.orchestrator.providers.docker import image as docker_image
from cubicle.orchestrator.providers.docker.provider import IMAGE_ENV
from cubicle.orchestrator.tasks import TASKS_DIR
from tests.test_import_cycles import REPO

pytestmark = [pytest.mark.slow]

PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
UV_INSTALL = [sys.executable, "-m", "uv", "pip", "install", "--quiet"]
LOCK = REPO / "requirements" / "host.txt"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built with the locked setuptools (no PyPI for the build)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(out), str(REPO)],
        check=True,
        cwd=out,
    )
    (built,) = out.glob("cubicle-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv (outside the checkout) with the wheel and its dependencies at the lock's
    versions; yields its python."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home / "venv", with_pip=False)
    python = home / "venv" / "bin" / "python"
    subprocess.run(
        [*UV_INSTALL, "--python", str(python), "--constraint", str(LOCK), str(wheel)],
        check=True,
        cwd=home,
    )
    yield python


def _outside(python: Path, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", IMAGE_ENV)}
    return subprocess.run(
        [str(python), "-I", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=python.parents[2],
        env=env,
    ).stdout


def test_the_wheel_installs_two_top_level_names(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as packed:
        names = packed.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert packed.read(top_level).decode().split() == ["cubicle", "cubicle_guest"]
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {
        "cubicle",
        "cubicle_guest",
    }


def test_the_installed_cubicle_is_the_wheels_with_the_checkouts_files(installed: Path) -> None:
    out = _outside(
        installed,
        "import json, cubicle, cubicle_guest\n"
        "from cubicle.orchestrator.providers.docker import image\n"
        "from cubicle.orchestrator import shipped, tasks\n"
        "print(json.dumps({'sandbox': repr(cubicle.Sandbox), 'file': cubicle.__file__,"
        " 'guest': cubicle_guest.__file__, 'root': str(shipped.source_root()),"
        " 'hash': image.content_hash('sha256:base'),"
        " 'tasks': sorted(t.name for t in tasks.shipped_tasks())}))\n",
    )
    found = json.loads(out)
    assert found["sandbox"] == "<class 'cubicle.orchestrator.sandbox.Sandbox'>"
    site = installed.parents[1] / "lib"
    for key in ("file", "guest", "root"):
        assert Path(found[key]).is_relative_to(site), (key, found[key])
    assert found["root"].endswith("cubicle/_shipped")
    assert found["hash"] == docker_image.content_hash("sha256:base")
    assert found["tasks"] == sorted(p.stem for p in TASKS_DIR.glob("*.toml"))


@pytest.mark.docker
def test_cubicle_drill_passes_from_the_installed_wheel(installed: Path, docker_image: str) -> None:
    """The venv finds the image this checkout built by its own content hash (no pinned ref)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", IMAGE_ENV)}
    done = subprocess.run(
        [str(installed.parent / "cubicle"), "drill", "--out", str(installed.parents[2] / "runs")],
        check=False,
        capture_output=True,
        text=True,
        cwd=installed.parents[2],
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "drill PASSED" in done.stdout, done.stdout
