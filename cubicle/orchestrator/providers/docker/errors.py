"""Translate docker-py and transport exceptions into cubicle errors — the only place that does.

Use ``with map_docker_errors("creating the container of dk-1234"):`` around engine calls. Every
docker-py exception class has a mapping (a test lists them and fails on a new one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

import docker.errors
import requests.exceptions

from cubicle.orchestrator.errors import (
    ConfigError,
    EngineUnavailable,
    ImageBuildError,
    ImageMissing,
    OrchestratorError,
    ProviderError,
)

__all__ = ["ENGINE_HINT", "MAPPED", "map_docker_errors"]

ENGINE_HINT: Final = (
    "start the Docker engine (scripts/ensure-docker, or `systemctl start docker`), "
    "or point DOCKER_HOST at one"
)
IMAGE_HINT: Final = "build it with: cubicle image build"

MAPPED: Final[dict[type[BaseException], type[OrchestratorError]]] = {
    docker.errors.ImageNotFound: ImageMissing,
    docker.errors.NotFound: ProviderError,
    docker.errors.APIError: ProviderError,
    docker.errors.BuildError: ImageBuildError,
    docker.errors.ContainerError: ProviderError,
    docker.errors.ImageLoadError: ImageBuildError,
    docker.errors.InvalidArgument: ConfigError,
    docker.errors.InvalidRepository: ConfigError,
    docker.errors.InvalidVersion: EngineUnavailable,
    docker.errors.InvalidConfigFile: EngineUnavailable,
    docker.errors.TLSParameterError: EngineUnavailable,
    docker.errors.ContextException: EngineUnavailable,
    docker.errors.ContextAlreadyExists: EngineUnavailable,
    docker.errors.ContextNotFound: EngineUnavailable,
    docker.errors.MissingContextParameter: EngineUnavailable,
    docker.errors.NullResource: ProviderError,
    docker.errors.StreamParseError: ProviderError,
    docker.errors.DeprecatedMethod: ProviderError,
    docker.errors.DockerException: EngineUnavailable,
}
"""docker-py exception class → the cubicle error it becomes (most specific class first)."""


@contextlib.contextmanager
def map_docker_errors(doing: str) -> Iterator[None]:
    """Re-raise docker-py / transport failures as cubicle errors naming what was being done.

    :param doing: what the block does, e.g. ``"creating the container of dk-1234"``.
    """
    try:
        yield
    except OrchestratorError:
        raise
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as exc:
        raise EngineUnavailable(
            f"the Docker engine did not answer while {doing}: {exc}", hint=ENGINE_HINT
        ) from exc
    except requests.exceptions.Timeout as exc:
        raise EngineUnavailable(
            f"the Docker engine timed out while {doing}: {exc}", hint=ENGINE_HINT
        ) from exc
    except docker.errors.DockerException as exc:
        ours = next(
            (cls for foreign, cls in MAPPED.items() if isinstance(exc, foreign)), ProviderError
        )
        text = _engine_words(exc)
        if ours is ImageMissing:
            raise ImageMissing(f"image missing while {doing}: {text}", hint=IMAGE_HINT) from exc
        if ours is EngineUnavailable:
            raise EngineUnavailable(
                f"the Docker engine is not usable while {doing}: {text}", hint=ENGINE_HINT
            ) from exc
        raise ours(f"the Docker engine refused {doing}: {text}") from exc


def _engine_words(exc: docker.errors.DockerException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation) if explanation else str(exc)
