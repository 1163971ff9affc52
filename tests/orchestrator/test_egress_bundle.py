"""The egress proxy as one file (cubicle.egress.bundle): what it holds, that it is the same bytes
every time (the Docker image's content hash covers it), that the Docker image ships exactly it,
and that the origin grammar loads without the proxy (the drivers import the grammar)."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

from cubicle.egress import bundle
from cubicle.orchestrator.providers import guest_build
from cubicle.orchestrator.providers.docker import image as docker_image
from cubicle.orchestrator.providers.vm import network as vm_network

SOURCES = Path(bundle.__file__).resolve().parent


def test_the_bundle_holds_the_package_and_its_own_empty_top() -> None:
    data = bundle.bundle_bytes()
    assert data == bundle.bundle_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as packed:
        # every module of the package but the bundler and the entry point (which is __main__)
        modules = sorted(
            p.name for p in SOURCES.glob("*.py") if p.name not in ("bundle.py", "__main__.py")
        )
        assert "questions.py" in modules and "proxy.py" in modules
        assert sorted(packed.namelist()) == [
            "__main__.py",
            "cubicle/__init__.py",
            *(f"cubicle/egress/{name}" for name in modules),
            "cubicle_guest/__init__.py",  # the VM channel's stream format, standard library only
            "cubicle_guest/egress_mux.py",
        ]
        for name in modules:
            assert packed.read(f"cubicle/egress/{name}") == (SOURCES / name).read_bytes()
        assert b"import" not in packed.read("cubicle/__init__.py")
        assert b"\nimport" not in packed.read("cubicle_guest/__init__.py")


def test_write_bundle_writes_once_per_content_readable_by_others(tmp_path: Path) -> None:
    first = bundle.write_bundle(tmp_path)
    assert first.read_bytes() == bundle.bundle_bytes()
    assert first.stat().st_mode & 0o777 == 0o644
    mtime = first.stat().st_mtime_ns
    assert bundle.write_bundle(tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial file left


def test_both_backends_run_the_bundle(tmp_path: Path) -> None:
    shipped = docker_image.own_inputs()[bundle.BUNDLE_NAME]
    assert shipped.read_bytes() == bundle.bundle_bytes()
    assert (
        f"COPY {bundle.BUNDLE_NAME} /opt/cubicle/"
        in (guest_build.REPO_ROOT / "images" / "docker" / "Dockerfile").read_text()
    )
    script = vm_network.proxy_script(tmp_path)
    assert script.name == bundle.BUNDLE_NAME and script.read_bytes() == bundle.bundle_bytes()


def test_the_grammar_loads_without_the_proxy_or_h11() -> None:
    code = (
        "import sys\n"
        "from cubicle.egress.origins import parse_policy\n"
        "import cubicle.drivers.policy_file\n"
        "print(sorted(m for m in ('h11', 'cubicle.egress.proxy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
