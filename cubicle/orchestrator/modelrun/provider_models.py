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
class AnthropicModel:
    """Claude ``name`` behind the Messages API at ``base_url``."""

    name: str
    api_key: str = field(repr=False)
    base_url: str = ANTHROPIC_BASE_URL

    @classmethod
    def from_environment(cls, name: str) -> AnthropicModel:
        """``ANTHROPIC_API_KEY`` (empty when unset) and ``ANTHROPIC_BASE_URL``."""
        return cls(
            name,
            api_key=api_key("anthropic"),
            base_url=os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE_URL,
        )

    @contextmanager
    def serve(self, context: LoopContext) -> Iterator[ModelEndpoint]:
        yield _endpoint("anthropic", self.name, self.api_key, self.base_url)


@dataclass(frozen=True)
class GeminiModel:
    """Gemini ``name`` behind ``generateContent`` at ``base_url``."""

    name: str
    api_key: str = field(repr=False)
    base_url: str = GEMINI_BASE_URL

    @classmethod
    def from_environment(cls, name: str) -> GeminiModel:
        """``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` (empty when neither is set) and
        ``GOOGLE_GEMINI_BASE_URL``."""
        return cls(
            name,
            api_key=api_key("gemini"),
            base_url=os.environ.get("GOOGLE_GEMINI_BASE_URL") or GEMINI_BASE_URL,
        )

    @contextmanager
    def serve(self, context: LoopContext) -> Iterator[ModelEndpoint]:
        yield _endpoint("gemini", self.name, self.api_key, self.base_url)


def _endpoint(provider: ModelProviderName, name: str, key: str, base_url: str) -> ModelEndpoint:
    """``provider``'s model ``name`` at ``base_url``; a loopback URL ignores proxy variables."""
    return ModelEndpoint(
        base_url=base_url,
        api_key=key,
        model=name,
        provider=provider,
        trust_env=not is_loopback(base_url),
    )


def model_source(provider: ModelProviderName, name: str) -> ModelSource:
    """The provider's model ``name`` with its SDK's environment (key, base URL)."""
    if provider == "anthropic":
        return AnthropicModel.from_environment(name)
    if provider == "gemini":
        return GeminiModel.from_environment(name)
    return ResponsesModel.from_environment(name)
