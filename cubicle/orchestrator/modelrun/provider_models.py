"""Anthropic's and Gemini's models as :class:`~cubicle.orchestrator.modelrun.run.ModelSource`\\ s
for :func:`~cubicle.orchestrator.modelrun.run.run` (OpenAI's is
:class:`~cubicle.orchestrator.modelrun.responses_model.ResponsesModel`).

Each serves a :class:`~cubicle.orchestrator.modelrun.run.ModelEndpoint` naming its provider, so
the run starts that provider's loop (``tool_runner``, ``generate_content``). Keys and base URLs
come from each SDK's usual environment (:meth:`AnthropicModel.from_environment`,
:meth:`GeminiModel.from_environment`); a loopback URL ignores proxy variables. :func:`model_source`
picks the source for a provider.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar, Self

from cubicle.orchestrator.modelrun.loop import is_loopback
from cubicle.orchestrator.modelrun.model_providers import ModelProviderName, api_key
from cubicle.orchestrator.modelrun.responses_model import ResponsesModel
from cubicle.orchestrator.modelrun.run import LoopContext, ModelEndpoint, ModelSource

__all__ = [
    "ANTHROPIC_BASE_URL",
    "GEMINI_BASE_URL",
    "AnthropicModel",
    "GeminiModel",
    "model_source",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/"


@dataclass(frozen=True)
class _SdkModel:
    """A model ``name`` behind its provider's API at ``base_url``; a subclass names the provider,
    its default URL and the environment variable that overrides it."""

    PROVIDER: ClassVar[ModelProviderName]
    DEFAULT_URL: ClassVar[str]
    URL_VARIABLE: ClassVar[str]

    name: str
    api_key: str = field(repr=False)
    base_url: str = ""

    def __post_init__(self) -> None:
        if not self.base_url:
            object.__setattr__(self, "base_url", self.DEFAULT_URL)

    @classmethod
    def from_environment(cls, name: str) -> Self:
        """The provider's key variable(s) (empty when unset) and :attr:`URL_VARIABLE`."""
        return cls(
            name, api_key=api_key(cls.PROVIDER), base_url=os.environ.get(cls.URL_VARIABLE, "")
        )

    @contextmanager
    def serve(self, context: LoopContext) -> Iterator[ModelEndpoint]:
        """The endpoint of the provider's loop; a loopback URL ignores proxy variables."""
        yield ModelEndpoint(
            base_url=self.base_url,
            api_key=self.api_key,
            model=self.name,
            provider=self.PROVIDER,
            trust_env=not is_loopback(self.base_url),
        )


@dataclass(frozen=True)
class AnthropicModel(_SdkModel):
    """Claude ``name`` behind the Messages API (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``)."""

    PROVIDER: ClassVar[ModelProviderName] = "anthropic"
    DEFAULT_URL: ClassVar[str] = ANTHROPIC_BASE_URL
    URL_VARIABLE: ClassVar[str] = "ANTHROPIC_BASE_URL"


@dataclass(frozen=True)
class GeminiModel(_SdkModel):
    """Gemini ``name`` behind ``generateContent`` (``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``,
    ``GOOGLE_GEMINI_BASE_URL``)."""

    PROVIDER: ClassVar[ModelProviderName] = "gemini"
    DEFAULT_URL: ClassVar[str] = GEMINI_BASE_URL
    URL_VARIABLE: ClassVar[str] = "GOOGLE_GEMINI_BASE_URL"


def model_source(provider: ModelProviderName, name: str) -> ModelSource:
    """The provider's model ``name`` with its SDK's environment (key, base URL)."""
    if provider == "anthropic":
        return AnthropicModel.from_environment(name)
    if provider == "gemini":
        return GeminiModel.from_environment(name)
    return ResponsesModel.from_environment(name)
