"""Scoped temporary grants: a person approves operations, USD limits, resources and a TTL once;
within it, matching calls of the app run without another card, up to the limits.

A grant is created only by the handler of ``app_grant``, a capability whose tier is fixed at
``confirm``: it runs only once a person approved the exact grant (its digest). ``GrantPolicy``
lowers a ``confirm`` or ``explicit`` decision to ``auto`` when a live grant covers the call —
operation listed, amount within what is left, resources matching, not expired — and never
lowers ``deny``, a guard's hold or the daily autonomous limit's hold. Each use is recorded
(idempotent by the call's key) when the call executes. Expired, exceeded or mismatched → the
call gets its normal tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from ..capabilities import Capability
from ..clock import Clock
from ..events import Origin
from ..policy import Policy, PolicyDecision
from .tables import GrantRecord

__all__ = ["DEFAULT_GRANT_TTL", "RESOURCE_FIELDS", "GrantPolicy", "LiveGrant"]

DEFAULT_GRANT_TTL = 120.0  # seconds
# the arguments that name what a call acts on; a grant with resources binds them
RESOURCE_FIELDS = ("asset", "symbol", "to", "recipient", "wallet", "account", "resource")


@dataclass(slots=True)
class LiveGrant:
    record: GrantRecord
    spent: dict[str, Decimal]

    def expired(self, now: datetime) -> bool:
        return now >= datetime.fromisoformat(self.record.expires_at)

    def left(self, operation: str) -> Decimal:
        limit = Decimal(self.record.limits_usd.get(operation, "0"))
        return limit - self.spent.get(operation, Decimal(0))

    def covers(
        self, cap: Capability, amount: Decimal, args: dict[str, Any] | None, now: datetime
    ) -> bool:
        op = cap.operation
        if op is None or op not in self.record.operations or self.expired(now):
            return False
        if amount > self.left(op):
            return False
        if self.record.resources and args is not None:
            named = [str(args[f]) for f in RESOURCE_FIELDS if f in args]
            if not named or any(n not in self.record.resources for n in named):
                return False
        return True


@dataclass(frozen=True)
class GrantPolicy(Policy):
    """A policy with the live grants of one app (loaded before each drive)."""

    grants: Sequence[LiveGrant] = ()
    clock: Clock | None = None
    floor: Literal["confirm"] | None = None  # per-action intents: a person, whatever the tier
    # a batch a person approved as one: its confirm-tier calls need no other card (an explicit
    # one still asks for its amount; a guard's hold still holds)
    batch_approved: bool = False
    # the grant each call was let through by, until its execution records the use
    chosen: dict[tuple[str, str], LiveGrant] = field(default_factory=dict)
    args_of: dict[str, dict[str, Any]] = field(default_factory=dict)

    def decide(
        self,
        cap: Capability,
        amount_usd: Decimal | None,
        *,
        spent_today: Decimal = Decimal(0),
        held_by: Sequence[str] = (),
        origin: Origin | None = None,
    ) -> PolicyDecision:
        # an app's tick is an outside event: its writes go to a person (the base policy), and
        # a person's grant or batch approval below is what lets them run on their own
        decision = super().decide(
            cap, amount_usd, spent_today=spent_today, held_by=held_by, origin=origin
        )
        if self.floor is not None:
            if decision.tier == "auto" and cap.is_write:
                return PolicyDecision(
                    "confirm", "the app asked for this action's approval", amount_usd
                )
            return decision
        if decision.tier not in ("confirm", "explicit") or held_by or decision.limited:
            return decision
        if cap.tier is not None:  # a tier the capability fixes (the engine's own cards)
            return decision
        if self.batch_approved and decision.tier == "confirm":
            return PolicyDecision("auto", "approved with the app's batch", amount_usd)
        if amount_usd is None or amount_usd < 0 or cap.tier is not None or self.clock is None:
            return decision
        now = self.clock.now()
        for grant in self.grants:
            if grant.covers(cap, amount_usd, self.args_of.get(cap.name), now):
                self.chosen[(cap.name, str(amount_usd))] = grant
                return PolicyDecision(
                    "auto", f"within grant {grant.record.grant_id[:8]}", amount_usd
                )
        return decision

    def take(self, cap: Capability, amount: Decimal) -> LiveGrant | None:
        """The grant a call now executing was let through by (forgotten once taken)."""
        return self.chosen.pop((cap.name, str(amount)), None)
