"""What model calls cost, and whether a run's USD budget allows the next one.

Prices live in one data file, ``prices.json`` (USD per million tokens: input, output, cache read,
cache write), looked up by model string (``anthropic:claude-sonnet-4-5``). A model may carry its
own ``price`` (``resolve_model(..., price=Price(...))``), which wins over the table. Money is
``Decimal`` throughout, never a float.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib import resources
from typing import Any

from ..exceptions import ConfigurationError
from .base import (
    AssistantMessage,
    Message,
    ModelRequest,
    StreamUsage,
    ToolSpec,
    ToolUsePart,
    UserTextMessage,
)

__all__ = [
    "DEFAULT_OUTPUT_ESTIMATE",
    "Price",
    "PriceTable",
    "budget_refusal",
    "cost_usd",
    "default_prices",
    "estimate_call_usd",
    "estimate_input_tokens",
    "message_chars",
    "parse_budget",
    "price_of",
    "prompt_chars",
    "tokens_of_chars",
]

MILLION = Decimal(1_000_000)
DEFAULT_OUTPUT_ESTIMATE = 4096  # output tokens assumed for a call whose max_tokens is not set


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Price:
        def dec(key: str, default: Any = None) -> Decimal:
            value = values.get(key, default)
            if value is None:
                raise ValueError(f"a price needs {key!r}")
            number = Decimal(str(value))
            if not number.is_finite() or number < 0:
                raise ValueError(f"price {key!r} must be a finite, non-negative number")
            return number

        return cls(
            input=dec("input"),
            output=dec("output"),
            cache_read=dec("cache_read", values.get("input")),
            cache_write=dec("cache_write", values.get("input")),
        )


_DATE_SUFFIX = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2})$")
# which table a provider's models are priced from when it has none of its own
_PRICED_AS = {"claude-cli": "anthropic", "codex-cli": "openai"}


class PriceTable:
    """Prices by provider and model, with aliases; see ``lookup`` for the matching rules."""

    def __init__(
        self, models: Mapping[str, Mapping[str, Price]], aliases: Mapping[str, str] | None = None
    ) -> None:
        self._models = {provider: dict(table) for provider, table in models.items()}
        self._aliases = dict(aliases or {})

    @classmethod
    def from_json(cls, text: str) -> PriceTable:
        data = json.loads(text)
        models = {
            provider: {name: Price.of(values) for name, values in table.items()}
            for provider, table in data.get("models", {}).items()
        }
        return cls(models, data.get("aliases", {}))

    def with_prices(self, prices: Mapping[str, Price]) -> PriceTable:
        """A copy with more prices, keyed by model string (``openai:my-finetune``)."""
        models = {provider: dict(table) for provider, table in self._models.items()}
        for name, price in prices.items():
            provider, _, model = name.partition(":")
            models.setdefault(provider, {})[model] = price
        return PriceTable(models, self._aliases)

    def lookup(self, name: str) -> Price | None:
        """The price of a model string, or None when unknown.

        Tried in order: an alias; the exact model; the model without a date suffix
        (``-20250929``); the provider's ``*`` entry (local servers are free). CLI agents are
        priced as the API model they run (``claude-cli:claude-sonnet-4-5``).
        """
        name = self._aliases.get(name, name)
        provider, sep, model = name.partition(":")
        if not sep:
            provider, model = name, ""
        if provider == "openai-compatible":
            model = model.split("@", 1)[0]
        for table_name in (provider, _PRICED_AS.get(provider)):
            if table_name is None:
                continue
            table = self._models.get(table_name, {})
            for candidate in (model, _DATE_SUFFIX.sub("", model)):
                aliased = self._aliases.get(f"{table_name}:{candidate}")
                if aliased is not None and aliased != name:
                    return self.lookup(aliased)
                if candidate in table:
                    return table[candidate]
            if "*" in table:
                return table["*"]
        return None


@cache
def default_prices() -> PriceTable:
    """The table shipped in ``prices.json``."""
    text = resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8")
    return PriceTable.from_json(text)


def price_of(
    model: object, name: str | None = None, table: PriceTable | None = None
) -> Price | None:
    """The price of a model: its own ``price`` attribute, else the table's entry for its name.

    ``name`` overrides the model's name (the model that actually answered a tiered call).
    """
    own = getattr(model, "price", None)
    if isinstance(own, Price) and (name is None or name == getattr(model, "name", None)):
        return own
    key = name if name is not None else getattr(model, "name", "")
    return (table or default_prices()).lookup(str(key))


def cost_usd(price: Price | None, usage: StreamUsage) -> Decimal | None:
    """The cost of one call's usage; None when the price is unknown."""
    if price is None:
        return None
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    )
    return total / MILLION


_ARGUMENTS = json.JSONEncoder(default=str)  # json.dumps(input, default=str)'s, built once


def message_chars(message: Message) -> int:
    """The characters of one message, as ``estimate_input_tokens`` counts them."""
    if isinstance(message, UserTextMessage):
        return len(message.text)
    if isinstance(message, AssistantMessage):
        chars = 0
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                chars += len(part.name) + len(_ARGUMENTS.encode(part.input))
            else:
                chars += len(part.text)
        return chars
    return sum(len(r.content) for r in message.results)


def prompt_chars(system: Sequence[str], tools: Sequence[ToolSpec]) -> int:
    """The characters of a request's system layers and tool schemas."""
    chars = sum(len(s) for s in system)
    for tool in tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(tool.input_schema))
    return chars


def tokens_of_chars(chars: int) -> int:
    """Four characters a token (at least one)."""
    return max(1, chars // 4)


def estimate_input_tokens(request: ModelRequest) -> int:
    """A rough count of a request's input tokens (four characters a token, schemas included)."""
    chars = prompt_chars(request.system, request.tools)
    return tokens_of_chars(chars + sum(message_chars(m) for m in request.messages))


def estimate_call_usd(
    price: Price | None, request: ModelRequest, *, input_tokens: int | None = None
) -> Decimal | None:
    """The most the next call may cost: its estimated input, uncached, and its full ``max_tokens``
    of output. Deliberately pessimistic, so that a budget is never overrun by the call it let
    through. ``input_tokens``: the request's ``estimate_input_tokens``, when already known."""
    if price is None:
        return None
    max_tokens = request.settings.get("max_tokens")
    output = (
        max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else DEFAULT_OUTPUT_ESTIMATE
    )
    if input_tokens is None:
        input_tokens = estimate_input_tokens(request)
    return (input_tokens * price.input + output * price.output) / MILLION


def budget_refusal(
    *,
    budget_usd: Decimal | None,
    spent_usd: Decimal,
    next_call_usd: Decimal | None,
    model: str,
) -> str | None:
    """Why the next call may not be made (the run then fails with reason ``budget``), or None.

    With a budget and no known price the call is refused: a budget that cannot be checked is
    not a budget.
    """
    if budget_usd is None:
        return None
    if next_call_usd is None:
        return (
            f"the run has a budget of ${budget_usd} but no price is known for {model}; "
            "give the model a price"
        )
    if spent_usd + next_call_usd > budget_usd:
        return (
            f"the next model call could cost up to ${next_call_usd:.4f}; ${spent_usd:.4f} of the "
            f"${budget_usd} budget is spent"
        )
    return None


def parse_budget(value: Decimal | str | None) -> Decimal | None:
    """A run's model budget in USD (``Agent(budget_usd=...)``): a finite, non-negative amount."""
    if value is None:
        return None
    try:
        budget = Decimal(str(value))
    except InvalidOperation as exc:
        raise ConfigurationError(f"budget_usd must be a number of dollars, not {value!r}") from exc
    if not budget.is_finite() or budget < 0:
        raise ConfigurationError("budget_usd must be a finite, non-negative amount")
    return budget
