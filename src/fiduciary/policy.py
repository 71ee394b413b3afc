"""Permission tiers: which calls run on their own and which wait for a person.

A call's tier is ``auto`` (runs), ``confirm`` (a person approves), ``explicit`` (a person approves
and re-types the amount) or ``deny`` (never runs). It is decided on the server from the call's
USD amount and operation, never from anything the model says:

- reads and previews → auto;
- an operation the preset does not know, or an unknown amount → confirm;
- a negative amount (a capability's bug or a trick) → confirm;
- ``amount < auto_below`` → auto, ``amount < confirm_below`` → confirm, else explicit;
- ``amount > deny_above`` (when set) or a denied operation → deny;
- an auto call that would take the principal past its daily autonomous limit → confirm;
- an auto call a guard holds for a person (``Verdict.confirm``, e.g. a first payment to a new
  recipient) → confirm, whatever the amount. A hold never lowers a tier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from decimal import Decimal
from typing import Literal

from .capabilities import Capability
from .exceptions import ConfigurationError

__all__ = ["PRESETS", "Policy", "PolicyDecision", "Threshold"]

TierName = Literal["auto", "confirm", "explicit", "deny"]
_ORDER: dict[TierName, int] = {"auto": 0, "confirm": 1, "explicit": 2, "deny": 3}


@dataclass(frozen=True, slots=True)
class Threshold:
    """Per-operation limits in USD."""

    auto_below: Decimal
    confirm_below: Decimal
    deny_above: Decimal | None = None

    def __post_init__(self) -> None:
        if self.auto_below < 0 or self.confirm_below < self.auto_below:
            raise ConfigurationError("a threshold needs 0 <= auto_below <= confirm_below")


def _t(auto: str, confirm: str) -> Threshold:
    return Threshold(Decimal(auto), Decimal(confirm))


PRESETS: dict[str, dict[str, Threshold]] = {
    "conservative": {
        "save": _t("5", "200"),
        "withdraw": _t("5", "200"),
        "send": _t("1", "50"),
        "borrow": _t("0", "100"),
        "repay": _t("5", "200"),
        "swap": _t("5", "100"),
        "pay": _t("1", "20"),
    },
    "balanced": {
        "save": _t("50", "1000"),
        "withdraw": _t("25", "500"),
        "send": _t("10", "200"),
        "borrow": _t("0", "500"),
        "repay": _t("50", "1000"),
        "swap": _t("25", "300"),
        "pay": _t("5", "50"),
    },
    "aggressive": {
        "save": _t("200", "5000"),
        "withdraw": _t("100", "2000"),
        "send": _t("50", "1000"),
        "borrow": _t("25", "2000"),
        "repay": _t("200", "5000"),
        "swap": _t("100", "2000"),
        "pay": _t("20", "200"),
    },
}


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    tier: TierName
    reason: str
    amount_usd: Decimal | None
    limited: bool = False  # the daily autonomous limit sent it to a person

    def at_least(self, other: TierName) -> bool:
        return _ORDER[self.tier] >= _ORDER[other]


@dataclass(frozen=True)
class Policy:
    """The permission configuration of an agent.

    ``preset`` names one of ``PRESETS``; ``thresholds`` overrides or adds operations;
    ``daily_autonomous_limit_usd`` caps what runs without a person per principal per UTC day
    (``None``: no cap); ``deny_operations`` are never executed.
    """

    preset: str = "balanced"
    thresholds: Mapping[str, Threshold] = field(default_factory=dict)
    daily_autonomous_limit_usd: Decimal | None = Decimal("100")
    deny_operations: frozenset[str] = frozenset()
    approval_ttl_seconds: float = 15 * 60

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ConfigurationError(
                f"unknown policy preset {self.preset!r}; choose one of {sorted(PRESETS)}"
            )
        limit = self.daily_autonomous_limit_usd
        if limit is not None and (not isinstance(limit, Decimal) or limit < 0):
            raise ConfigurationError("daily_autonomous_limit_usd must be a non-negative Decimal")

    def threshold(self, operation: str) -> Threshold | None:
        return self.thresholds.get(operation) or PRESETS[self.preset].get(operation)

    def decide(
        self,
        cap: Capability,
        amount_usd: Decimal | None,
        *,
        spent_today: Decimal = Decimal(0),
        held_by: Sequence[str] = (),
    ) -> PolicyDecision:
        """The tier of one call. ``spent_today``: USD auto-executed by the principal today;
        ``held_by``: the guards that hold this call for a person."""
        if cap.operation is not None and cap.operation in self.deny_operations:
            return PolicyDecision("deny", f"operation {cap.operation!r} is denied", amount_usd)
        if not cap.is_write:
            return PolicyDecision("auto", "reads and previews run on their own", amount_usd)
        threshold = self.threshold(cap.operation) if cap.operation else None
        cap_usd = threshold.deny_above if threshold is not None else None
        if cap_usd is not None and amount_usd is not None and amount_usd > cap_usd:
            return PolicyDecision(
                "deny", f"${amount_usd} is above the ${cap_usd} limit", amount_usd
            )
        if amount_usd is not None and amount_usd < 0:
            decision = PolicyDecision("confirm", "a negative amount needs a person", amount_usd)
        elif cap.tier is not None:
            decision = PolicyDecision(cap.tier, "fixed by the capability", amount_usd)
        elif threshold is None:
            decision = PolicyDecision("confirm", "no threshold for this operation", amount_usd)
        elif amount_usd is None:
            decision = PolicyDecision("confirm", "the amount is unknown", amount_usd)
        elif amount_usd < threshold.auto_below:
            decision = PolicyDecision("auto", f"below ${threshold.auto_below}", amount_usd)
        elif amount_usd < threshold.confirm_below:
            decision = PolicyDecision("confirm", f"below ${threshold.confirm_below}", amount_usd)
        else:
            decision = PolicyDecision(
                "explicit", f"${threshold.confirm_below} or more: re-type the amount", amount_usd
            )
        if decision.tier == "auto" and held_by:
            return PolicyDecision(
                "confirm", f"{', '.join(held_by)} holds it for a person", amount_usd
            )
        limit = self.daily_autonomous_limit_usd
        over = limit is not None and amount_usd is not None and spent_today + amount_usd > limit
        if decision.tier == "auto" and over:
            return self.over_limit(amount_usd, spent_today)
        return decision

    def over_limit(self, amount_usd: Decimal | None, spent_today: Decimal) -> PolicyDecision:
        """The decision for an auto call that the daily autonomous limit sends to a person."""
        return PolicyDecision(
            "confirm",
            f"the daily autonomous limit of ${self.daily_autonomous_limit_usd} would be exceeded "
            f"(${spent_today} already today)",
            amount_usd,
            limited=True,
        )

    @staticmethod
    def day_start(now: datetime) -> datetime:
        """Start of the UTC day the daily limit counts from."""
        if now.tzinfo is not None:
            now = now.astimezone(UTC)
        return datetime.combine(now.date(), time.min, tzinfo=now.tzinfo)

    @staticmethod
    def higher(a: TierName, b: TierName) -> TierName:
        return a if _ORDER[a] >= _ORDER[b] else b
