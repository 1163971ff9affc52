"""Old guest image tags are pruned after a build; recent, kept and in-use ones survive."""

from __future__ import annotations

import contextlib
import io
import tarfile
import time

import docker
import docker.errors
import pytest

from cubicle.orchestrator.providers.docker.image import prune_stale_images

REPOSITORY = "cubicle-prunetest"


def _import_tiny_image(client: docker.DockerClient, tag: str) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        info = tarfile.TarInfo("marker")
        payload = tag.encode()
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    client.api.import_image_from_data(data.getvalue(), repository=REPOSITORY, tag=tag)


@pytest.mark.docker
def test_prune_keeps_the_recent_the_kept_and_the_used() -> None:
    client = docker.from_env()
    tags = [f"v{i}" for i in range(6)]
    container = None
    try:
        for tag in tags:
            _import_tiny_image(client, tag)
            time.sleep(1.1)  # distinct creation times, which order the builds
        # v0 is old but a (stopped) container uses it; v1 is old but is the one to keep
        container = client.containers.create(f"{REPOSITORY}:v0", command=["/marker"])
        removed = prune_stale_images(
            client,
            keep=f"{REPOSITORY}:v1",
            progress=lambda line: None,
            keep_recent=3,
            repository=REPOSITORY,
        )
        assert sorted(removed) == [f"{REPOSITORY}:v2"]
        left = sorted(t for image in client.images.list(name=REPOSITORY) for t in image.tags)
        assert left == [f"{REPOSITORY}:{t}" for t in ("v0", "v1", "v3", "v4", "v5")]
    finally:
        if container is not None:
            container.remove(force=True)
        for image in client.images.list(name=REPOSITORY):
            for tag in image.tags:
                with contextlib.suppress(docker.errors.NotFound):
                    client.images.remove(tag, force=True)
        client.close()
