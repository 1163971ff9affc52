"""The VM image build's font-cache check
(:func:`cubicle.orchestrator.providers.vm.build.check_font_caches`, run by the build in its golden
boot) on a real guest: it passes on the image as built, and when a program rescanned a font folder
it refuses, naming the cache file and the folder."""

from __future__ import annotations

import pytest

from cubicle.orchestrator.errors import ImageBuildError
from cubicle.orchestrator.provider import ExecResult
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm import image as vm_image
from cubicle.orchestrator.providers.vm.build import check_font_caches
from cubicle.orchestrator.sandbox import Sandbox
from tests.vm.conftest import assert_gone

pytestmark = [pytest.mark.vm, pytest.mark.slow]

USER_FONT_FOLDER = """
mkdir -p "$HOME/.local/share/fonts"
cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$HOME/.local/share/fonts/"
fc-list >/dev/null
"""
"""A font folder of the user's own (fontconfig's ``<dir prefix="xdg">fonts</dir>``), which no
system cache covers, then a program that reads the fonts: fontconfig scans that folder and
writes its cache in the user's ``~/.cache/fontconfig``."""


def test_the_font_cache_check_holds_on_the_image_and_names_a_rescanned_folder(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    assert vm_provider.image is not None
    image = vm_image.load_image(vm_provider.image, vm_provider.home)
    assert image.manifest["font_caches"], "the build recorded no system font cache"
    # the manifest also records the Debian package versions the image was built from
    recorded = image.manifest["debian_packages"]
    missing = sorted(set(vm_image.guest_packages()) - set(recorded))
    assert not missing and all(recorded.values()), missing
    with Sandbox.create("vm", screen=(1280, 800), ready_timeout_s=180) as sandbox:
        leak_check.append(sandbox.id)

        def run(argv: list[str]) -> ExecResult:
            return sandbox.exec(argv, timeout=120)

        check_font_caches(image, run)
        made = sandbox.exec(["sh", "-c", USER_FONT_FOLDER], timeout=120)
        assert made.exit_code == 0, made.stderr
        with pytest.raises(ImageBuildError) as refused:
            check_font_caches(image, run)
    message = str(refused.value)
    assert "/home/cubicle/.cache/fontconfig/" in message, message
    assert "(a rescan of /home/cubicle/.local/share/fonts)" in message, message
    assert "a new fc-list wrote the caches" in message, message
    assert "/var/cache/fontconfig" not in message, message  # the system caches held
    assert_gone(vm_provider, sandbox.id)
