"""The model providers a run can talk to, their loops, default models and key variables (pure).

One table, read by ``cubicle run``, ``cubicle drill``, task files and the model sources:

========== ============================= ================================ ========================
provider   loops                         key variable                     default model
========== ============================= ================================ ========================
openai     ``toolset``, ``runner``       ``OPENAI_API_KEY``               ``gpt-5.4``
anthropic  ``tool_runner``               ``ANTHROPIC_API_KEY``            ``claude-sonnet-5``
gemini     ``generate_content``          ``GEMINI_API_KEY`` or            ``gemini-3-computer-use``
                                         ``GOOGLE_API_KEY``
========== ============================= ================================ ========================

``tool_runner`` is ``client.beta.messages.tool_runner`` with a
:class:`~cubicle.drivers.claude_toolset.ClaudeToolset`; ``generate_content`` is the
``google-genai`` client's ``models.generate_content`` in a loop with
:class:`~cubicle.drivers.gemini_actions.GeminiComputer` (:mod:`cubicle.drivers.gemini_turn`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, get_args

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.loop import LoopKind
from cubicle.orchestrator.tasks import MODEL_PROVIDERS, ModelProviderName

__all__ = [
    "DEFAULT_MODELS",
    "KEY_VARIABLES",
    "MODEL_PROVIDERS",
    "PROVIDER_LOOPS",
    "ModelProviderName",
    "api_key",
    "check_loop",
    "loops_help",
    "provider_of_loop",
]

PROVIDER_LOOPS: Final[Mapping[ModelProviderName, tuple[LoopKind, ...]]] = {
    "openai": ("toolset", "runner"),
    "anthropic": ("tool_runner",),
    "gemini": ("generate_content",),
}
"""Every loop each provider has, the default first for ``anthropic``/``gemini`` and ``runner``
for ``openai`` (``cubicle run``'s default; the drill runs them all)."""

KEY_VARIABLES: Final[Mapping[ModelProviderName, tuple[str, ...]]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
"""Each SDK's usual environment variables for its key, in the order the SDK reads them."""

DEFAULT_MODELS: Final[Mapping[ModelProviderName, str]] = {
    "openai": "gpt-5.4",
    "anthropic": "claude-sonnet-5",
    "gemini": "gemini-3-computer-use",
}

if set(PROVIDER_LOOPS) != set(get_args(ModelProviderName)) or set(MODEL_PROVIDERS) != set(
    PROVIDER_LOOPS
):  # pragma: no cover - a table edited without the other
    raise AssertionError("PROVIDER_LOOPS and ModelProviderName disagree")


def api_key(provider: ModelProviderName) -> str:
    """The provider's key from its SDK's environment variable; empty when none is set."""
    for name in KEY_VARIABLES[provider]:
        value = os.environ.get(name)
        if value:
            return value
    return ""


def provider_of_loop(loop: LoopKind) -> ModelProviderName:
    """The provider whose loop ``loop`` is."""
    for provider, loops in PROVIDER_LOOPS.items():
        if loop in loops:
            return provider
    raise ConfigError(f"unknown loop {loop!r}")  # pragma: no cover - LoopKind is closed


def check_loop(provider: ModelProviderName, loop: str) -> LoopKind:
    """``loop`` when ``provider`` has it.

    :raises ConfigError: naming the provider's loops.
    """
    loops = PROVIDER_LOOPS[provider]
    if loop not in loops:
        raise ConfigError(
            f"--loop {loop}: the {provider} provider has the loops {', '.join(loops)}"
        )
    return next(known for known in loops if known == loop)


def loops_help() -> str:
    """``openai: toolset, runner; anthropic: tool_runner; …`` for ``--help``."""
    return "; ".join(f"{p}: {', '.join(loops)}" for p, loops in PROVIDER_LOOPS.items())
