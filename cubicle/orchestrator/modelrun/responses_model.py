"""A model behind the Responses API (OpenAI's, or a local stand-in such as
:class:`cubicle.drivers.scripted_model.ScriptedModel`): a
:class:`~cubicle.orchestrator.modelrun.run.ModelSource` for
:func:`~cubicle.orchestrator.modelrun.run.run`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from cubicle.orchestrator.modelrun.loop import is_loopback
from cubicle.orchestrator.modelrun.run import LoopContext, ModelEndpoint

__all__ = ["DEFAULT_BASE_URL", "ResponsesModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class ResponsesModel:
    """``name`` at ``base_url`` with ``api_key``; a loopback URL ignores proxy variables.

    Before the loop it takes one screenshot through the driver (recorded: the screen the run
    starts from)."""

    name: str
    api_key: str = field(repr=False)
    base_url: str = DEFAULT_BASE_URL

    @classmethod
    def from_environment(cls, name: str) -> ResponsesModel:
        """``name`` with the openai package's environment: ``OPENAI_API_KEY`` (empty when unset:
        the caller decides whether that is an error) and ``OPENAI_BASE_URL`` (default
        :data:`DEFAULT_BASE_URL`)."""
        return cls(
            name,
            api_key=os.environ.get("OPENAI_API_KEY", ""),
            base_url=os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
        )

    @contextmanager
    def serve(self, context: LoopContext) -> Iterator[ModelEndpoint]:
        context.driver.screenshot()
        yield ModelEndpoint(
            base_url=self.base_url,
            api_key=self.api_key,
            model=self.name,
            trust_env=not is_loopback(self.base_url),
        )
