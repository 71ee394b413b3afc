"""Permission tiers: which calls run on their own and which wait for a person.

A call's tier is ``auto`` (runs), ``confirm`` (a person approves), ``explicit`` (a person approves
and re-types the amount) or ``deny`` (never runs). It is decided on the server from the call's
USD amount and operation, never from anything the model says:

- reads and previews → auto;
- an operation the policy does not know, or an unknown amount → confirm;
- a negative amount (a capability's bug or a trick) → confirm;
- ``amount < auto_below`` → auto, ``amount < confirm_below`` → confirm, else explicit;
- an operation declared with a fixed tier (``Operation("cancel_order", tier="auto")``) → that
  tier, whatever the amount (none is needed);
- ``amount > deny_above`` (when set) or a denied operation → deny;
- an auto call that would take the principal past its daily autonomous limit → confirm;
- an auto call a guard holds for a person (``Verdict.confirm``, e.g. a first payment to a new
  recipient) → confirm, whatever the amount. A hold never lowers a tier.
- an auto write proposed in answer to an outside event (an attention decision, a webhook, an
  app's tick, a chat that is not the principal's: the message's ``Origin``) → confirm, unless
  the origin's autonomous budget allows its operation and amount (then the daily limit still
  counts it). A person in their own chat or through the API: as above.

Operations are words the capabilities name (``@capability(operation="refund")``). The presets
know the wallet's (``save``, ``send``, ``pay``, …); any other domain declares its own with
``Operation`` (and may drop the presets with ``preset=None``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Literal

from .capabilities import Capability
from .dual_control import DualControl
from .events import Origin
from .exceptions import ConfigurationError
from .signed_approvals import SignatureRule

__all__ = ["PRESETS", "Operation", "Policy", "PolicyDecision", "Threshold"]

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

Amount = Decimal | int | str


def _usd(name: str, what: str, value: Amount | None) -> Decimal | None:
    """An amount of an operation's declaration as a Decimal (None stays None)."""
    if value is None:
        return None
    # money is never a float (nor a bool, which is an int)
    if isinstance(value, bool) or not isinstance(value, Decimal | int | str):
        raise ConfigurationError(
            f"operation {name!r}: {what} must be a Decimal, an int or a string, not "
            f"{type(value).__name__}"
        )
    try:
        amount = Decimal(value)
    except InvalidOperation as exc:
        raise ConfigurationError(f"operation {name!r}: {what} {value!r} is not a number") from exc
    if not amount.is_finite() or amount < 0:
        raise ConfigurationError(f"operation {name!r}: {what} must be a finite amount >= 0")
    return amount


@dataclass(frozen=True, slots=True, init=False)
class Operation:
    """An operation a domain declares, with its tiers: what its capabilities name in
    ``@capability(operation=...)``.

    By amount (USD, as ``Decimal``, ``int`` or ``str``; never a float): below ``auto_below`` a
    call runs on its own (default 0: never), below ``confirm_below`` a person confirms it, at or
    above it the person re-types the amount (default None: never asked to); above
    ``deny_above`` it never runs. Or, for calls that carry no amount, a fixed ``tier``
    (``"auto"``, ``"confirm"``, ``"explicit"`` or ``"deny"``), which ``deny_above`` may still
    cap. A capability's own ``tier=`` takes precedence over the operation's, except ``deny``.
    """

    name: str
    auto_below: Decimal
    confirm_below: Decimal | None
    deny_above: Decimal | None
    tier: TierName | None

    def __init__(
        self,
        name: str,
        *,
        auto_below: Amount | None = None,
        confirm_below: Amount | None = None,
        deny_above: Amount | None = None,
        tier: TierName | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("an operation needs a non-empty name")
        if tier is not None and tier not in _ORDER:
            raise ConfigurationError(
                f"operation {name!r}: tier must be one of {', '.join(_ORDER)}, not {tier!r}"
            )
        if tier is not None and (auto_below is not None or confirm_below is not None):
            raise ConfigurationError(
                f"operation {name!r}: give either a fixed tier or auto_below / confirm_below"
            )
        auto = _usd(name, "auto_below", auto_below) or Decimal(0)
        confirm = _usd(name, "confirm_below", confirm_below)
        if confirm is not None and confirm < auto:
            raise ConfigurationError(f"operation {name!r}: confirm_below is below auto_below")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "auto_below", auto)
        object.__setattr__(self, "confirm_below", confirm)
        object.__setattr__(self, "deny_above", _usd(name, "deny_above", deny_above))
        object.__setattr__(self, "tier", tier)

    @classmethod
    def from_threshold(cls, name: str, threshold: Threshold) -> Operation:
        return cls(
            name,
            auto_below=threshold.auto_below,
            confirm_below=threshold.confirm_below,
            deny_above=threshold.deny_above,
        )

    def decide(self, amount_usd: Decimal | None) -> PolicyDecision:
        """The tier of a call of this operation by its amount alone (``deny_above`` aside)."""
        if self.tier is not None:
            return PolicyDecision(self.tier, f"fixed for the {self.name!r} operation", amount_usd)
        if amount_usd is None:
            return PolicyDecision("confirm", "the amount is unknown", amount_usd)
        if amount_usd < self.auto_below:
            return PolicyDecision("auto", f"below ${self.auto_below}", amount_usd)
        if self.confirm_below is None:
            reason = (
                f"${self.auto_below} or more"
                if self.auto_below > 0
                else f"every {self.name!r} call needs a person"
            )
            return PolicyDecision("confirm", reason, amount_usd)
        if amount_usd < self.confirm_below:
            return PolicyDecision("confirm", f"below ${self.confirm_below}", amount_usd)
        return PolicyDecision(
            "explicit", f"${self.confirm_below} or more: re-type the amount", amount_usd
        )


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    tier: TierName
    reason: str
    amount_usd: Decimal | None
    limited: bool = False  # the daily autonomous limit sent it to a person
    outside: bool = False  # an outside event's write beyond its budget: sent to a person

    def at_least(self, other: TierName) -> bool:
        return _ORDER[self.tier] >= _ORDER[other]


@dataclass(frozen=True)
class Policy:
    """The permission configuration of an agent.

    ``preset`` names one of ``PRESETS`` (the wallet's operations), or is ``None`` for none;
    ``operations`` declares a domain's own (``Operation``), and ``thresholds`` overrides or adds
    operations by ``Threshold`` (an operation may be in one of the two, not both; either
    replaces the preset's operation of that name); ``daily_autonomous_limit_usd`` caps what runs
    without a person per principal per UTC day (``None``: no cap); ``deny_operations`` are never
    executed. ``dual_control`` rules make an approval above a threshold need N approvers of a
    group, the proposer never one of them (``fiduciary.dual_control``); ``signatures`` says
    which approvals must be signed with a passkey (``fiduciary.signed_approvals``).
    """

    preset: str | None = "balanced"
    thresholds: Mapping[str, Threshold] = field(default_factory=dict)
    daily_autonomous_limit_usd: Decimal | None = Decimal("100")
    deny_operations: frozenset[str] = frozenset()
    approval_ttl_seconds: float = 15 * 60
    operations: Sequence[Operation] = ()
    dual_control: Sequence[DualControl] = ()
    signatures: SignatureRule | None = None
    _table: Mapping[str, Operation] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise ConfigurationError(
                f"unknown policy preset {self.preset!r}; choose one of {sorted(PRESETS)} or None"
            )
        limit = self.daily_autonomous_limit_usd
        if limit is not None and (not isinstance(limit, Decimal) or limit < 0):
            raise ConfigurationError("daily_autonomous_limit_usd must be a non-negative Decimal")
        object.__setattr__(self, "operations", tuple(self.operations))
        if any(not isinstance(r, DualControl) for r in self.dual_control):
            raise ConfigurationError("dual_control must be a sequence of DualControl rules")
        object.__setattr__(self, "dual_control", tuple(self.dual_control))
        if self.signatures is not None and not isinstance(self.signatures, SignatureRule):
            raise ConfigurationError("signatures must be a SignatureRule")
        object.__setattr__(self, "_table", self._resolve())

    def _resolve(self) -> dict[str, Operation]:
        """Every operation this policy knows, by name: the preset's, then the user's."""
        preset = PRESETS[self.preset] if self.preset is not None else {}
        table = {name: Operation.from_threshold(name, t) for name, t in preset.items()}
        for name, threshold in self.thresholds.items():
            if not isinstance(threshold, Threshold):
                raise ConfigurationError(
                    f"thresholds[{name!r}] must be a Threshold (declare an Operation in "
                    "operations= for a fixed tier)"
                )
            table[name] = Operation.from_threshold(name, threshold)
        declared: set[str] = set()
        for operation in self.operations:
            if not isinstance(operation, Operation):
                raise ConfigurationError("operations= takes Operation(...) declarations")
            if operation.name in declared or operation.name in self.thresholds:
                raise ConfigurationError(f"operation {operation.name!r} is declared twice")
            declared.add(operation.name)
            table[operation.name] = operation
        return table

    def operation(self, name: str) -> Operation | None:
        """The operation ``name`` as this policy knows it (None: unknown, so a person confirms)."""
        return self._table.get(name)

    def threshold(self, operation: str) -> Threshold | None:
        """The operation's limits as a ``Threshold``: None when unknown, or when it is declared
        with a fixed tier or without ``confirm_below`` (see ``operation``)."""
        known = self._table.get(operation)
        if known is None or known.tier is not None or known.confirm_below is None:
            return None
        return Threshold(known.auto_below, known.confirm_below, known.deny_above)

    def decide(
        self,
        cap: Capability,
        amount_usd: Decimal | None,
        *,
        spent_today: Decimal = Decimal(0),
        held_by: Sequence[str] = (),
        origin: Origin | None = None,
    ) -> PolicyDecision:
        """The tier of one call. ``spent_today``: USD auto-executed by the principal today;
        ``held_by``: the guards that hold this call for a person; ``origin``: the outside event
        the run's latest message came from (None: its principal in person)."""
        operation = self._table.get(cap.operation) if cap.operation is not None else None
        denied = cap.operation is not None and (
            cap.operation in self.deny_operations
            or (operation is not None and operation.tier == "deny")
        )
        if denied:
            return PolicyDecision("deny", f"operation {cap.operation!r} is denied", amount_usd)
        if not cap.is_write:
            return PolicyDecision("auto", "reads and previews run on their own", amount_usd)
        cap_usd = operation.deny_above if operation is not None else None
        if cap_usd is not None and amount_usd is not None and amount_usd > cap_usd:
            return PolicyDecision(
                "deny", f"${amount_usd} is above the ${cap_usd} limit", amount_usd
            )
        if amount_usd is not None and amount_usd < 0:
            decision = PolicyDecision("confirm", "a negative amount needs a person", amount_usd)
        elif cap.tier is not None:
            decision = PolicyDecision(cap.tier, "fixed by the capability", amount_usd)
        elif operation is None:
            decision = PolicyDecision("confirm", "no threshold for this operation", amount_usd)
        else:
            decision = operation.decide(amount_usd)
        if decision.tier == "auto" and held_by:
            return PolicyDecision(
                "confirm", f"{', '.join(held_by)} holds it for a person", amount_usd
            )
        if (
            decision.tier == "auto"
            and origin is not None
            and not origin.allows(cap.operation, amount_usd)
        ):
            return PolicyDecision("confirm", _outside(origin), amount_usd, outside=True)
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


def _outside(origin: Origin) -> str:
    """Why a write of a run an outside event started waits for a person."""
    if not origin.budget:
        return f"started by {origin.source}, with no autonomous budget: a person approves writes"
    allowed = ", ".join(f"{op} up to ${usd}" for op, usd in sorted(origin.budget.items()))
    return f"beyond the autonomous budget of {origin.source} ({allowed} a call)"
