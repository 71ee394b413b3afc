"""Model tiers and thinking effort, chosen per turn.

A turn's tier follows the highest risk among the capabilities it may call: reads only → ``fast``;
any write → ``standard``; a high-risk financial write → ``powerful``. Its thinking effort follows
the financial complexity of what the person asked (amounts, operations, conditions). Both may be
overridden. ``TieredModel`` routes each request to the model of its tier.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from ..capabilities import Capability, Kind, Risk
from ..exceptions import ConfigurationError, ModelError
from .base import (
    Message,
    Model,
    ModelEvent,
    ModelRequest,
    StreamUsage,
    StructuredModel,
    UserTextMessage,
)

__all__ = [
    "DEFAULT_TIERS",
    "EFFORTS",
    "TIERS",
    "Effort",
    "Tier",
    "TieredModel",
    "TurnPlan",
    "choose_effort",
    "choose_tier",
    "is_high_risk_financial",
    "plan_turn",
]

Tier = Literal["fast", "standard", "powerful"]
Effort = Literal["low", "medium", "high"]
TIERS: tuple[Tier, ...] = get_args(Tier)
EFFORTS: tuple[Effort, ...] = get_args(Effort)

# the model of each tier when a provider is named with ``:auto`` (``anthropic:auto``)
DEFAULT_TIERS: Mapping[str, Mapping[Tier, str]] = {
    "anthropic": {
        "fast": "claude-haiku-4-5",
        "standard": "claude-sonnet-4-6",
        "powerful": "claude-opus-4-6",
    },
    "openai": {"fast": "gpt-5-mini", "standard": "gpt-5.1", "powerful": "gpt-5.2"},
    "gemini": {
        "fast": "gemini-2.5-flash-lite",
        "standard": "gemini-2.5-flash",
        "powerful": "gemini-2.5-pro",
    },
    "claude-cli": {"fast": "haiku", "standard": "sonnet", "powerful": "opus"},
    "codex-cli": {
        "fast": "gpt-5.1-codex-mini",
        "standard": "gpt-5.3-codex",
        "powerful": "gpt-5.1-codex-max",
    },
}


def is_high_risk_financial(cap: Capability) -> bool:
    """A write that moves money (it declares an amount or a policy operation) and is high risk
    (declared ``risk="high"`` or flagged ``irreversible``)."""
    financial = cap.amount_usd is not None or cap.operation is not None
    high = cap.risk is Risk.HIGH or "irreversible" in cap.flags
    return cap.is_write and financial and high


# a kind by its value or by itself (a StrEnum member hashes as its value): Kind(k) is slow
_KINDS: dict[Kind | str, Kind] = {k.value: k for k in Kind}


def choose_tier(
    capabilities: Iterable[Capability],
    *,
    allowed_kinds: Iterable[Kind | str] | None = None,
    override: Tier | None = None,
) -> Tier:
    """The tier of a turn that may call ``capabilities`` (within ``allowed_kinds``)."""
    if override is not None:
        if override not in TIERS:
            raise ConfigurationError(f"unknown model tier {override!r}; use one of {TIERS}")
        return override
    kinds = None if allowed_kinds is None else {_KINDS.get(k) or Kind(k) for k in allowed_kinds}
    callable_caps = [c for c in capabilities if kinds is None or c.kind in kinds]
    writes = [c for c in callable_caps if c.is_write]
    if any(is_high_risk_financial(c) for c in writes):
        return "powerful"
    if writes:
        return "standard"
    return "fast"


_AMOUNT = re.compile(
    r"[$€£]\s?\d[\d,]*(?:\.\d+)?"
    r"|\b\d[\d,]*(?:\.\d+)?\s?(?:%|percent\b|usd\b|usdc\b|usdt\b|dollars?\b|eur\b|euros?\b"
    r"|btc\b|eth\b|sol\b|sui\b|k\b)",
    re.IGNORECASE,
)
_OPERATIONS = (
    "pay",
    "send",
    "transfer",
    "swap",
    "convert",
    "exchange",
    "borrow",
    "repay",
    "lend",
    "withdraw",
    "deposit",
    "save",
    "invest",
    "sell",
    "buy",
    "rebalance",
    "refund",
    "stake",
    "unstake",
    "bridge",
)
_OPERATION = re.compile(r"\b(" + "|".join(_OPERATIONS) + r")(?:s|ed|ing)?\b", re.IGNORECASE)
_CONDITION = re.compile(
    r"\b(if|unless|then|after|before|only|each|every|split|between|both|until|compare|cheapest"
    r"|best|optimi[sz]e|maximi[sz]e|minimi[sz]e|schedule|recurring|monthly|weekly|half|rest)\b",
    re.IGNORECASE,
)


def choose_effort(text: str, *, tier: Tier = "standard", override: Effort | None = None) -> Effort:
    """The thinking effort for a request, from its financial complexity.

    Amounts (up to 3), distinct money operations and conditions / multi-step words (up to 2)
    each add a point, and the powerful tier one more: 0-1 → low, 2-3 → medium, 4+ → high.
    """
    if override is not None:
        if override not in EFFORTS:
            raise ConfigurationError(f"unknown effort {override!r}; use one of {EFFORTS}")
        return override
    amounts = min(3, len(_AMOUNT.findall(text)))
    operations = len({m.lower() for m in _OPERATION.findall(text)})
    conditions = min(2, len(_CONDITION.findall(text)))
    score = amounts + operations + conditions + (1 if tier == "powerful" else 0)
    if score >= 4:
        return "high"
    if score >= 2:
        return "medium"
    return "low"


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """The tier and effort of one model turn, and the request settings that carry them."""

    tier: Tier
    effort: Effort
    settings: dict[str, Any]


def plan_turn(
    capabilities: Iterable[Capability],
    messages: Sequence[Message],
    *,
    allowed_kinds: Iterable[Kind | str] | None = None,
    settings: Mapping[str, Any] | None = None,
    tier: Tier | None = None,
    effort: Effort | None = None,
) -> TurnPlan:
    """Tier and effort for the next turn. ``settings`` (the agent's model settings) win over the
    computed values when they name a ``tier`` or an ``effort``; ``tier`` / ``effort`` are the
    agent's overrides. The effort is judged on the latest user message."""
    base = dict(settings or {})
    chosen_tier = choose_tier(
        capabilities, allowed_kinds=allowed_kinds, override=base.get("tier", tier)
    )
    latest = next((m.text for m in reversed(messages) if isinstance(m, UserTextMessage)), "")
    chosen_effort = choose_effort(latest, tier=chosen_tier, override=base.get("effort", effort))
    return TurnPlan(
        tier=chosen_tier,
        effort=chosen_effort,
        settings={**base, "tier": chosen_tier, "effort": chosen_effort},
    )


class TieredModel:
    """A model per tier; each request goes to the model of ``request.settings["tier"]``.

    Usage events name the model that answered, so that costs are priced correctly.
    """

    def __init__(
        self,
        *,
        fast: Model,
        standard: Model,
        powerful: Model,
        name: str | None = None,
        default: Tier = "standard",
    ) -> None:
        self.models: dict[Tier, Model] = {"fast": fast, "standard": standard, "powerful": powerful}
        self._name = name or f"tiered:{standard.name}"
        self._default: Tier = default

    @property
    def name(self) -> str:
        return self._name

    def model_for(self, request: ModelRequest) -> Model:
        tier = request.settings.get("tier", self._default)
        return self.models.get(tier, self.models[self._default])

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        model = self.model_for(request)
        async for event in model.stream(request):
            if isinstance(event, StreamUsage) and event.model is None:
                event = replace(event, model=model.name)
            yield event

    async def complete_json(self, system: str, prompt: str, schema: dict[str, Any]) -> Any:
        model = self.models[self._default]
        if not isinstance(model, StructuredModel):
            raise ModelError(f"{model.name} cannot answer with JSON", code="bad_request")
        return await model.complete_json(system, prompt, schema)
