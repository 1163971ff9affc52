"""One guest build for both backends (cubicle/orchestrator/providers/guest_build.py): what goes
into every guest changes both images' names, a backend's own file only its own; the wheelhouse
holds the agent and its locked dependencies (requirements/guest.txt, checked by hash) as wheels the
guest's Python installs."""

from __future__ import annotations

import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cubicle.orchestrator.providers import guest_build
from cubicle.orchestrator.providers.docker import image as docker_image
from cubicle.orchestrator.providers.vm import build as vm_build
from cubicle.orchestrator.providers.vm import image as vm_image

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The image sources of this checkout, copied (images/, cubicle_guest/, the guest's lock)."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "images", root / "images", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "cubicle_guest").mkdir()
    for path in guest_build.guest_sources(REPO):
        shutil.copy2(path, root / "cubicle_guest" / path.name)
    (root / "requirements").mkdir()
    shutil.copy2(REPO / guest_build.GUEST_LOCK, root / guest_build.GUEST_LOCK)
    return root


def _refs(root: Path) -> tuple[str, str]:
    return docker_image.content_hash("sha256:base", root), vm_image.image_ref(root)


def _append(relative: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with (root / relative).open("a") as file:
            file.write("\n# edited\n")

    return edit


@pytest.mark.parametrize(
    ("edit", "docker_changes", "vm_changes"),
    [
        (_append("images/guest-packages.txt"), True, True),
        (_append("images/desktop/tint2rc"), True, True),
        (_append("images/guest-setup"), True, True),
        (_append("cubicle_guest/screen.py"), True, True),
        (_append("cubicle_guest/pyproject.toml"), True, True),
        (_append("requirements/guest.txt"), True, True),
        (
            lambda root: (root / "cubicle_guest" / "extra_module.py").write_text("X = 1\n"),
            True,
            True,
        ),
        (_append("images/desktop/supervisor.py"), True, True),
        (_append("images/docker/Dockerfile"), True, False),
        (_append("images/vm/cubicle-init"), False, True),
        (_append("images/vm/provision"), False, True),
        (
            lambda root: (root / "cubicle_guest" / "notes.txt").write_text("not packed\n"),
            False,
            False,
        ),
    ],
)
def test_each_input_names_the_images_it_goes_into(
    checkout: Path, edit: Callable[[Path], None], docker_changes: bool, vm_changes: bool
) -> None:
    docker_before, vm_before = _refs(checkout)
    edit(checkout)
    docker_after, vm_after = _refs(checkout)
    assert (docker_after != docker_before, vm_after != vm_before) == (docker_changes, vm_changes)


def test_the_docker_ref_depends_on_its_base_and_both_on_the_locked_dependencies(
    checkout: Path,
) -> None:
    docker_before, vm_before = _refs(checkout)
    assert docker_image.content_hash("sha256:other", checkout) != docker_before
    pinned = guest_build.guest_requirements(checkout)
    assert [p.split("==")[0] for p in pinned] == ["mss", "pillow", "python-xlib", "six"]
    assert all(re.fullmatch(r"[a-z0-9-]+==[0-9][^ ]*", p) for p in pinned), pinned
    # another file of the same version (a hash line changed): both images change
    lock = checkout / guest_build.GUEST_LOCK
    lock.write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, lock.read_text(), count=1))
    assert guest_build.guest_requirements(checkout) == pinned
    assert docker_image.content_hash("sha256:base", checkout) != docker_before
    assert vm_image.image_ref(checkout) != vm_before


def test_a_missing_or_empty_guest_lock_is_named(checkout: Path) -> None:
    lock = checkout / guest_build.GUEST_LOCK
    lock.write_text("# nothing pinned\n")
    with pytest.raises(Exception, match=r"guest.txt pins no package"):
        guest_build.guest_requirements(checkout)
    lock.unlink()
    with pytest.raises(Exception, match=r"cannot read the guest agent's lock .*guest\.txt"):
        guest_build.guest_requirements(checkout)


def test_a_missing_input_is_named(checkout: Path) -> None:
    (checkout / "images" / "docker" / "Dockerfile").unlink()
    with pytest.raises(Exception, match=r"image sources are not available: .*Dockerfile"):
        docker_image.content_hash("sha256:base", checkout)


def test_both_backends_stage_the_shared_files_and_the_security_source(tmp_path: Path) -> None:
    shared = guest_build.guest_files()
    assert {"guest-packages.txt", "desktop/install", "desktop/tint2rc"} <= set(shared)
    assert docker_image.image_inputs().items() >= shared.items()
    guest_build.stage(docker_image.image_inputs(), tmp_path)
    listed = (tmp_path / guest_build.SECURITY_LIST).read_text()
    assert (
        listed == f"deb http://deb.debian.org/debian-security {guest_build.SUITE}-security main\n"
    )
    assert (tmp_path / "desktop" / "tint2rc").read_bytes() == shared["desktop/tint2rc"].read_bytes()
    dockerfile = (REPO / "images" / "docker" / "Dockerfile").read_text()
    assert f"COPY {guest_build.SECURITY_LIST} /etc/apt/sources.list.d/" in dockerfile


@pytest.mark.slow
@pytest.mark.parametrize(("machine", "platform_tag"), [("amd64", "x86_64"), ("aarch64", "aarch64")])
def test_the_wheelhouse_holds_the_agent_and_its_pinned_dependencies_for_the_guest(
    tmp_path: Path, machine: str, platform_tag: str
) -> None:
    """Needs PyPI (or the configured index); the checkout is left as it was."""
    before = sorted(p.name for p in (REPO / "cubicle_guest").iterdir())
    wheels = tmp_path / "wheels"
    guest_build.build_wheelhouse(wheels, machine=machine, progress=lambda line: None)
    names = sorted(p.name for p in wheels.iterdir())
    for pinned in guest_build.guest_requirements():
        name, _, version = pinned.partition("==")
        prefix = f"{name.replace('-', '_').lower()}-{version}-"
        assert any(n.lower().startswith(prefix) for n in names), (pinned, names)
    pillow = next(n for n in names if n.startswith("pillow-"))
    assert "-cp311-" in pillow and pillow.endswith(f"_{platform_tag}.whl"), pillow
    agent = next(n for n in names if n.startswith("cubicle_guest-"))
    with zipfile.ZipFile(wheels / agent) as packed:
        modules = {Path(n).name for n in packed.namelist() if n.startswith("cubicle_guest/")}
    assert {p.name for p in guest_build.guest_sources() if p.suffix == ".py"} == modules
    assert sorted(p.name for p in (REPO / "cubicle_guest").iterdir()) == before


@pytest.mark.slow
def test_the_vm_staging_holds_every_file_provision_reads(tmp_path: Path) -> None:
    """Every ``$src/...`` path images/vm/provision reads (and the desktop's install script, run
    by images/guest-setup on ``$src/desktop``) is in the folder the VM build gives it; its wheels
    are the manifest's."""
    staging = tmp_path / "stage"
    wheels = vm_build.provision_source(staging, lambda line: None)
    assert wheels == sorted(p.name for p in (staging / "wheels").iterdir())
    assert any(name.startswith("cubicle_guest-") for name in wheels)
    provision = (REPO / "images" / "vm" / "provision").read_text()
    install = (REPO / "images" / "desktop" / "install").read_text()
    read = list(re.findall(r'"\$src/([^"*]+)"', provision))
    read += [f"desktop/{m}" for m in re.findall(r'"\$src/([^"*]+)"', install)]
    read.append("desktop/install")  # guest-setup's desktop step runs it
    assert {"cubicle-init", "cubicle-reap", "guest-setup", "wheels", "desktop"} <= set(read)
    assert {"desktop/tint2rc", "desktop/supervisor.py"} <= set(read)
    assert [name for name in read if not (staging / name).exists()] == []


@pytest.mark.slow
def test_a_wheel_whose_hash_is_not_the_locks_is_refused(checkout: Path, tmp_path: Path) -> None:
    """The wheelhouse takes only the files the lock names: mss's hashes changed, the build fails
    naming the step, and pip's log names the package and the hash it got."""
    lock = checkout / guest_build.GUEST_LOCK
    forged, count = re.subn(
        r"(mss==\S+ \\\n(?:\s+--hash=sha256:)?)[0-9a-f]{64}( \\\n\s+--hash=sha256:)[0-9a-f]{64}",
        lambda m: m[1] + "ab" * 32 + m[2] + "cd" * 32,
        lock.read_text(),
    )
    assert count == 1, "the lock's mss entry is not two hash lines"
    lock.write_text(forged)
    with pytest.raises(Exception, match="downloading the guest's wheels failed") as caught:
        guest_build.build_wheelhouse(
            tmp_path / "wheels", machine="amd64", progress=lambda line: None, root=checkout
        )
    log = str(getattr(caught.value, "log_tail", ""))
    assert "DO NOT MATCH THE HASHES" in log and "mss==" in log, log
