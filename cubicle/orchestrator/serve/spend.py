"""Session spending limits: the operator's price table and each session's consumption.

``cubicle serve --prices FILE`` reads a TOML table of prices in **USD per million tokens**, the
way model prices are published::

    [models."gpt-5.4"]
    input = 1.25            # required
    cached_input = 0.125    # optional; default: the input price
    output = 10.0           # required

Prices are never invented: for a model without an entry, a session's ``spend_control.consumed``
stays null and a numeric ``spend_control.limit`` is refused naming the model.

Consumption (:class:`Spend`) is estimated from the ``usage`` of every model response of the
session's turns: ``(input - cached) x input + cached x cached_input + output x output``, summed
exactly and reported floored to whole USD cents, as the API types say. A response without usage
adds nothing and marks the estimate :attr:`Spend.incomplete`. When consumption reaches the limit
the session pauses (status ``budget_reached``, :mod:`cubicle.orchestrator.serve.worker`) until
``sessions.update`` sets a limit above it (or none).
"""

from __future__ import annotations

import math
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.serve.errors import bad_request

__all__ = ["ModelPrice", "PriceTable", "Spend", "check_limit", "load_prices", "parse_prices"]

PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens."""

    input: float
    cached_input: float
    output: float

    def cents(self, usage: Mapping[str, Any]) -> float | None:
        """The cost of one response's ``usage`` in USD cents (``None``: no usable counts)."""
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        if not isinstance(tokens_in, int) or not isinstance(tokens_out, int):
            return None
        if not _count(tokens_in) or not _count(tokens_out):
            return None
        details = usage.get("input_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else 0
        cached = min(cached, tokens_in) if isinstance(cached, int) and _count(cached) else 0
        fresh = tokens_in - cached
        usd = fresh * self.input + cached * self.cached_input + tokens_out * self.output
        usd /= PER_TOKENS
        return usd * 100


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class PriceTable:
    """Prices by model name (empty: no prices, every consumption null)."""

    models: Mapping[str, ModelPrice]
    source: str = "no --prices"

    def price(self, model: str) -> ModelPrice | None:
        return self.models.get(model)


def _price_field(table: Mapping[str, Any], model: str, name: str, source: str) -> float:
    value = table.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e6:
        raise ConfigError(
            f"--prices {source}: models.{model!r}.{name} must be a number of USD per million "
            f"tokens (0 or more), got {value!r}"
        )
    return float(value)


def load_prices(path: Path) -> PriceTable:
    """Read ``--prices FILE``.

    :raises ConfigError: unreadable, not TOML, or a model entry that is wrong (naming it).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--prices {path}: cannot read it: {exc.strerror}") from None
    return parse_prices(text, str(path))


def parse_prices(text: str, source: str) -> PriceTable:
    """A price table from TOML ``text``; ``source`` names it in errors.

    :raises ConfigError: not TOML, or a model entry that is wrong (naming it).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--prices {source}: not TOML: {exc}") from None
    unknown = sorted(set(data) - {"models"})
    models = data.get("models")
    if unknown or not isinstance(models, dict) or not models:
        raise ConfigError(
            f"--prices {source}: wants [models.NAME] tables with input and output prices in USD "
            "per million tokens" + (f" (unknown key {unknown[0]!r})" if unknown else "")
        )
    prices: dict[str, ModelPrice] = {}
    for model, table in models.items():
        if not isinstance(table, dict):
            raise ConfigError(f"--prices {source}: models.{model!r} must be a table")
        extra = sorted(set(table) - {"input", "cached_input", "output"})
        if extra:
            raise ConfigError(
                f"--prices {source}: models.{model!r}.{extra[0]} is not a price "
                "(input, cached_input, output)"
            )
        price_in = _price_field(table, model, "input", source)
        cached = (
            _price_field(table, model, "cached_input", source)
            if "cached_input" in table
            else price_in
        )
        prices[model] = ModelPrice(price_in, cached, _price_field(table, model, "output", source))
    return PriceTable(prices, source)


class Spend:
    """One session's limit and estimated consumption (thread-safe).

    :param price: the session model's price, or ``None`` (consumption unknown: stays null).
    """

    def __init__(self, price: ModelPrice | None, limit: int | None = None) -> None:
        self.price = price
        self.limit = limit
        self._cents = 0.0
        self.incomplete = 0
        """Responses whose usage was missing (their cost is not in the estimate)."""
        self._lock = threading.Lock()

    @property
    def consumed(self) -> int | None:
        """Floored USD cents, or ``None`` without a price."""
        if self.price is None:
            return None
        with self._lock:
            return math.floor(self._cents + 1e-9)

    def add(self, usage: object) -> bool:
        """Add one model response's ``usage``; ``True`` when the limit is now reached."""
        if self.price is None:
            return False
        cents = self.price.cents(usage) if isinstance(usage, Mapping) else None
        with self._lock:
            if cents is None:
                self.incomplete += 1
            else:
                self._cents += cents
        return self.reached

    @property
    def reached(self) -> bool:
        consumed = self.consumed
        return self.limit is not None and consumed is not None and consumed >= self.limit

    def resource(self) -> dict[str, int | None]:
        """The session's ``spend_control`` (USD cents)."""
        return {"limit": self.limit, "consumed": self.consumed}


def check_limit(limit: int | None, *, model: str, prices: PriceTable) -> int | None:
    """A request's ``spend_control.limit`` (its shape already checked:
    :class:`cubicle.orchestrator.serve.requests.SpendControl`) for a session of ``model``.

    :raises ApiError: 400 naming ``spend_control.limit`` and the model when it is a number and
        the price table has no price for the model (its spend could not be counted).
    """
    if limit is not None and prices.price(model) is None:
        raise bad_request(
            f"spend_control.limit {limit}: cubicle serve has no price for model {model!r} "
            f"({prices.source}), so it cannot count spend against a limit; start it with "
            "--prices FILE listing the model, or send a null limit",
            "spend_control.limit",
        )
    return limit
