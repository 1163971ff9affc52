"""Build the Docker guest image (``cubicle image build``), content-addressed.

Steps, each reported through ``progress`` one line at a time:

1. **Base.** ``debian:bookworm-slim`` when present or pullable within :data:`PULL_TIMEOUT_S`;
   else ``cubicle-base:bookworm`` when present; else bootstrap it from Debian's mirror
   (``debootstrap --variant=minbase bookworm`` into a temporary folder → tar → ``docker import``).
   Bootstrapping needs root and ``debootstrap`` on the host (scripts/host-packages/docker.txt).
2. **Tag.** The image tag is a hash of everything that goes into it: what every guest is built
   from (:func:`cubicle.orchestrator.providers.guest_build.input_hash`: package list, desktop, agent
   sources and pinned dependencies, the wheelhouse recipe), this backend's own files
   (Dockerfile, egress proxy) and the base image id: ``cubicle-guest:<hash>``. When
   that tag exists the build is a no-op ("up to date").
3. **Context.** A temporary folder with the files above plus the wheelhouse of the guest agent
   for the engine's machine (:func:`~cubicle.orchestrator.providers.guest_build.build_wheelhouse`),
   because containers here cannot reach PyPI.
4. **Build** through the engine's build API, streaming the log; ``cubicle-guest:latest`` points at
   the result.

The source files are read from the repository checkout this module lives in (``images/``,
``guest/``): building needs a checkout (or an editable install), running does not.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import docker
import docker.errors
import requests.exceptions

from cubicle.egress.bundle import BUNDLE_NAME, write_bundle
from cubicle.orchestrator.errors import ImageBuildError, ImageMissing
from cubicle.orchestrator.hostdirs import host_folder
from cubicle.orchestrator.provider import Progress
from cubicle.orchestrator.providers.docker.errors import IMAGE_HINT, map_docker_errors
from cubicle.orchestrator.providers.guest_build import (
    DEBIAN_MIRROR,
    LOG_TAIL_LINES,
    REPO_ROOT,
    build_wheelhouse,
    debootstrap_argv,
    guest_files,
    input_hash,
    run_streaming,
    stage,
)

__all__ = [
    "BASE_BOOTSTRAPPED",
    "BASE_REGISTRY",
    "IMAGE_REPOSITORY",
    "build_image",
    "current_image_ref",
    "image_inputs",
    "push_image",
]

IMAGE_REPOSITORY: Final = "cubicle-guest"
BASE_REGISTRY: Final = "debian:bookworm-slim"
BASE_BOOTSTRAPPED: Final = "cubicle-base:bookworm"
PULL_TIMEOUT_S: Final = 20.0
BUNDLE_CACHE: Final = Path.home() / ".cache" / "cubicle" / "egress"
"""Where the egress proxy's one-file bundle is written for the build context (one per content)."""


def own_inputs(root: Path = REPO_ROOT) -> dict[str, Path]:
    """This backend's files of the build context (name → source), beside the shared ones."""
    return {
        "Dockerfile": root / "images" / "docker" / "Dockerfile",
        BUNDLE_NAME: write_bundle(host_folder(BUNDLE_CACHE)),
    }


def image_inputs(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Build-context name → source file of everything copied into the image context."""
    return {**guest_files(root), **own_inputs(root)}


def content_hash(base_id: str, root: Path = REPO_ROOT) -> str:
    """Hash of every input of the image (:func:`.guest_build.input_hash`) on ``base_id``."""
    return input_hash(own_inputs(root), [f"base={base_id}"], root)


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        return None


def _present_base(client: docker.DockerClient) -> str | None:
    """The base image to build on, if one is already present (registry base preferred)."""
    for ref in (BASE_REGISTRY, BASE_BOOTSTRAPPED):
        if _image_id(client, ref) is not None:
            return ref
    return None


def current_image_ref(client: docker.DockerClient) -> str:
    """The tag the current sources build to, if that image exists.

    :raises ImageMissing: no base, or no image for the current sources (says which).
    """
    with map_docker_errors("looking up the guest image"):
        base = _present_base(client)
        if base is None:
            raise ImageMissing(
                "the cubicle guest image is not built (no base image either)", hint=IMAGE_HINT
            )
        base_id = _image_id(client, base) or ""
        ref = f"{IMAGE_REPOSITORY}:{content_hash(base_id)}"
        if _image_id(client, ref) is None:
            stale = [t for image in client.images.list(name=IMAGE_REPOSITORY) for t in image.tags]
            raise ImageMissing(
                f"the cubicle guest image {ref} for the current sources is not built"
                + (f" (found older: {', '.join(sorted(stale))})" if stale else ""),
                hint=IMAGE_HINT,
            )
    return ref


def _pull_registry_base(client: docker.DockerClient, progress: Progress) -> bool:
    """Pull the registry base on ``client``'s engine (the one building), with a short timeout."""
    progress(f"base: trying to pull {BASE_REGISTRY} (timeout {PULL_TIMEOUT_S:.0f} s)")
    api = client.api
    saved = api.timeout
    try:
        api.timeout = int(PULL_TIMEOUT_S)
        try:
            repository, tag = BASE_REGISTRY.split(":")
            api.pull(repository, tag=tag)
        finally:
            api.timeout = saved
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        progress(f"base: pull failed ({str(exc).splitlines()[0][:160]}); bootstrapping from Debian")
        return False
    return True


def bootstrap_base(client: docker.DockerClient, progress: Progress) -> str:
    """debootstrap a minbase bookworm and import it as :data:`BASE_BOOTSTRAPPED`."""
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "no Debian base image is available and debootstrap is not installed",
            hint="apt-get install debootstrap (scripts/host-packages/docker.txt), or make "
            f"{BASE_REGISTRY} pullable",
        )
    if os.geteuid() != 0:
        raise ImageBuildError(
            "no Debian base image is available and bootstrapping one needs root (debootstrap)",
            hint=f"run `cubicle image build` once as root, or make {BASE_REGISTRY} pullable",
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cubicle-base-") as work:
        rootfs = Path(work) / "rootfs"
        progress(f"base: debootstrap --variant=minbase bookworm from {DEBIAN_MIRROR}")
        run_streaming(debootstrap_argv(rootfs), progress, "debootstrap")
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        archive = Path(work) / "rootfs.tar"
        progress("base: packing the root file system")
        run_streaming(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(archive), "."],
            progress,
            "packing the base root file system",
        )
        progress(f"base: importing as {BASE_BOOTSTRAPPED}")
        repository, tag = BASE_BOOTSTRAPPED.split(":")
        with map_docker_errors(f"importing {BASE_BOOTSTRAPPED}"):
            client.api.import_image_from_file(str(archive), repository=repository, tag=tag)
    progress(f"base: {BASE_BOOTSTRAPPED} ready in {time.monotonic() - started:.1f} s")
    return BASE_BOOTSTRAPPED


def ensure_base(client: docker.DockerClient, progress: Progress) -> str:
    """The base image ref, pulling or bootstrapping it when absent."""
    with map_docker_errors("looking up the base image"):
        present = _present_base(client)
    if present is not None:
        return present
    if _pull_registry_base(client, progress):
        return BASE_REGISTRY
    return bootstrap_base(client, progress)


def _fill_context(client: docker.DockerClient, context: Path, progress: Progress) -> None:
    """The build context: :func:`image_inputs` and the wheelhouse for the engine's machine."""
    stage(image_inputs(), context)
    with map_docker_errors("asking the engine for its machine"):
        machine = str(client.info().get("Architecture") or "x86_64")
    build_wheelhouse(context / "wheels", machine=machine, progress=progress)


def _stream_build(events: Iterator[dict[str, Any]], progress: Progress) -> None:
    tail: list[str] = []
    for event in events:
        text = event.get("stream") or event.get("status") or ""
        for line in str(text).splitlines():
            if line.strip():
                tail = [*tail[-LOG_TAIL_LINES + 1 :], line]
                progress(f"  {line}")
        if "error" in event:
            raise ImageBuildError(
                f"docker build failed: {str(event['error']).strip()}", log_tail="\n".join(tail)
            )


def build_image(client: docker.DockerClient, *, progress: Progress, force: bool = False) -> str:
    """Build the guest image for the current sources unless it exists; return its ref."""
    started = time.monotonic()
    base = ensure_base(client, progress)
    with map_docker_errors(f"looking up {base}"):
        base_id = _image_id(client, base) or ""
    ref = f"{IMAGE_REPOSITORY}:{content_hash(base_id)}"
    with map_docker_errors(f"looking up {ref}"):
        exists = _image_id(client, ref) is not None
    if exists and not force:
        progress(f"image {ref} is up to date")
        return ref
    progress(f"image: building {ref} on {base}")
    with tempfile.TemporaryDirectory(prefix="cubicle-image-") as work:
        context = Path(work)
        _fill_context(client, context, progress)
        with map_docker_errors(f"building {ref}"):
            events = client.api.build(
                path=str(context),
                tag=ref,
                buildargs={"BASE": base},
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                nocache=force,
                labels={"io.cubicle.image": ref},
            )
            _stream_build(events, progress)
            client.images.get(ref).tag(IMAGE_REPOSITORY, "latest")
    progress(f"image {ref} built in {time.monotonic() - started:.1f} s")
    prune_stale_images(client, keep=ref, progress=progress)
    return ref


def prune_stale_images(
    client: docker.DockerClient,
    *,
    keep: str,
    progress: Progress,
    keep_recent: int = 3,
    repository: str = IMAGE_REPOSITORY,
) -> list[str]:
    """Remove guest image tags older builds left behind; return the tags removed.

    Candidates are ``cubicle-guest:<hash>`` tags other than ``keep`` and ``latest``, older than
    the ``keep_recent`` newest builds (another checkout may be testing one of those). A tag a
    container still uses is kept: the engine refuses with 409, which is expected, not an error.
    """
    removed: list[str] = []
    with map_docker_errors("listing guest images"):
        images = client.images.list(name=repository)
    images.sort(key=lambda image: str(image.attrs.get("Created", "")), reverse=True)
    for image in images[keep_recent:]:
        for tag in image.tags:
            if tag in (keep, f"{repository}:latest"):
                continue
            try:
                client.images.remove(tag)
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # in use by a container
                    continue
                raise
            removed.append(tag)
    if removed:
        progress(f"image: removed {len(removed)} stale tag(s): {', '.join(sorted(removed))}")
    return removed


PUSH_REPORT_BYTES: Final = 128 * 1024 * 1024
"""``image push`` reports its progress every this many bytes."""


def push_image(
    source: docker.DockerClient,
    target: docker.DockerClient,
    ref: str,
    *,
    progress: Progress,
    target_name: str,
) -> str:
    """Send ``ref`` and its base image from the ``source`` engine to ``target`` through the
    engines' APIs — ``docker save`` streamed into ``docker load``, no registry and no file on
    either host. The base goes too (layers it shares with ``ref`` travel once) because the
    image tag is computed from the base's id (:func:`current_image_ref` on the target).
    A no-op when ``target`` already has ``ref`` with the same image id. Returns ``ref``.

    :raises ImageMissing: ``ref`` is not on ``source``.
    """
    started = time.monotonic()
    with map_docker_errors(f"looking up {ref} on the local engine"):
        wanted = _image_id(source, ref)
        if wanted is None:
            raise ImageMissing(f"the image {ref} is not on the local engine", hint=IMAGE_HINT)
        names = [ref] + [base for base in (_present_base(source),) if base is not None]
    with map_docker_errors(f"looking up {ref} on {target_name}"):
        if _image_id(target, ref) == wanted:
            progress(f"image {ref} is up to date on {target_name}")
            return ref
    progress(f"image push: {', '.join(names)} -> {target_name}")
    api = source.api
    with map_docker_errors(f"saving {', '.join(names)} on the local engine"):
        # the multi-name form of GET /images/get (docker-py's get_image takes one name)
        url = f"{api.base_url}/v{api.api_version}/images/get"
        response = api.get(url, params={"names": names}, stream=True)
        if response.status_code != 200:
            raise ImageMissing(
                f"the local engine could not save {', '.join(names)}: "
                f"{response.status_code} {response.text.strip()[:300]}"
            )
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        reported = 0
        for chunk in response.iter_content(chunk_size=1024 * 1024):
            sent += len(chunk)
            if sent - reported >= PUSH_REPORT_BYTES:
                reported = sent
                progress(f"  {sent / 2**20:.0f} MiB sent")
            yield chunk

    try:
        with map_docker_errors(f"loading {ref} into {target_name}"):
            for event in target.api.load_image(chunks()):  # type: ignore[no-untyped-call]
                if "error" in event:
                    raise ImageBuildError(
                        f"{target_name} refused the image: {str(event['error']).strip()}"
                    )
            loaded = _image_id(target, ref)
    finally:
        response.close()
    if loaded != wanted:
        raise ImageBuildError(f"{target_name} has {ref} as {loaded}, not {wanted}, after the load")
    elapsed = time.monotonic() - started
    progress(f"image {ref} pushed to {target_name}: {sent / 2**20:.0f} MiB in {elapsed:.1f} s")
    return ref
