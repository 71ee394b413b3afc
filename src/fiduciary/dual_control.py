"""Dual control: above a threshold, an approval needs N distinct approvers from a named group.

A rule (``DualControl``) is part of the ``Policy`` (``Policy(dual_control=[...])``) and names a
group (``finance``), its members (``alice``, ``bob``, ``carol``), how many of them must approve
(``required=2``), the amount in USD from which it applies (``at_or_above_usd``) and, optionally,
the operations it covers (none named: every operation). An action whose amount is unknown is
taken to be above every threshold. When several rules apply, the one that needs the most
approvers wins.

Under a rule:

- the proposer (the principal on whose behalf the run acts) can never approve, whatever its
  scopes; only members of the group can;
- each approver's approval is a vote (``ApprovalVote``) for the arguments it names; one person
  counts once, however many devices or channels they use (the store's unique key);
- an approver who edits a modifiable field votes for other arguments: that starts a new
  approval set, and the earlier votes do not count with it; from then on the approval is
  shown as the set votes on it (``as_voted``: the edited arguments, their digest, tier and
  amount, with the note ``EDITED``), and an approver who approves what is shown joins it;
- any member's deny denies; the action runs only when N distinct members approved the same
  arguments; the expiry applies to the whole set;
- the approval row leaves ``pending`` with one conditional update (``decide_approval``), so of
  two approvers completing the set at once, or the N-th approval and the expiry, one wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from .exceptions import ConfigurationError
from .stores.base import ApprovalRecord, Approvals, ApprovalVote

__all__ = [
    "EDITED",
    "DualControl",
    "Progress",
    "as_voted",
    "count_for",
    "progress",
    "rule_for",
    "standing",
]

EDITED = "an edit started a new approval set"


@dataclass(frozen=True, slots=True)
class DualControl:
    """N of M approvers from a named group, at or above an amount in USD."""

    group: str
    members: frozenset[str]
    required: int = 2
    at_or_above_usd: Decimal = Decimal(0)
    operations: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.group.strip():
            raise ConfigurationError("a dual-control rule needs the name of its group")
        if isinstance(self.members, str):  # frozenset("alice") would be its letters
            raise ConfigurationError(
                f"dual control {self.group!r}: members must be a collection of names"
            )
        members = frozenset(self.members)
        if not members or any(not isinstance(m, str) or not m.strip() for m in members):
            raise ConfigurationError(f"dual control {self.group!r}: members must be named")
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "operations", frozenset(self.operations))
        if isinstance(self.required, bool) or not isinstance(self.required, int):
            raise ConfigurationError(f"dual control {self.group!r}: required must be an int")
        if not 1 <= self.required <= len(members):
            raise ConfigurationError(
                f"dual control {self.group!r}: required must be between 1 and the "
                f"{len(members)} members"
            )
        floor = self.at_or_above_usd
        if not isinstance(floor, Decimal) or not floor.is_finite() or floor < 0:
            raise ConfigurationError(
                f"dual control {self.group!r}: at_or_above_usd must be a Decimal >= 0"
            )

    def applies(self, amount_usd: Decimal | None, operation: str | None) -> bool:
        """Whether an action of this amount and operation needs this rule's approvers."""
        if self.operations and operation not in self.operations:
            return False
        return amount_usd is None or amount_usd >= self.at_or_above_usd


def rule_for(
    rules: Iterable[DualControl], amount_usd: Decimal | None, operation: str | None
) -> DualControl | None:
    """The rule an action needs (the one needing the most approvers), or None."""
    matching = [r for r in rules if r.applies(amount_usd, operation)]
    return max(matching, key=lambda r: r.required) if matching else None


@dataclass(frozen=True, slots=True)
class Progress:
    """Where an approval under dual control stands: the current set (the latest arguments
    approved) and the votes of earlier sets, which an edit left behind."""

    group: str
    required: int
    votes: tuple[ApprovalVote, ...]
    superseded: tuple[ApprovalVote, ...]
    proposed_digest: str | None = None  # the digest of the arguments the run proposed

    @property
    def approvers(self) -> tuple[str, ...]:
        return tuple(v.approver for v in self.votes)

    @property
    def edited(self) -> bool:
        """Whether an edit started the current set (earlier votes, or the proposed
        arguments, are for other arguments)."""
        if self.superseded:
            return True
        return bool(self.votes) and self.votes[0].args_digest != (
            self.proposed_digest or self.votes[0].args_digest
        )

    def text(self) -> str:
        """``1 of 2 approved (alice, 12:03)``; a new set says so."""
        who = ", ".join(f"{v.approver}, {v.at:%H:%M}" for v in self.votes)
        line = f"{len(self.votes)} of {self.required} approved"
        if who:
            line += f" ({who})"
        if self.edited:
            line += f"; {EDITED}"
        return line


def progress(
    rule: DualControl, votes: Sequence[ApprovalVote], proposed_digest: str | None = None
) -> Progress:
    """The progress of an approval from its votes (oldest first): the current set is the
    arguments of the latest vote; each approver counts once in it. ``proposed_digest``: the
    digest of the arguments the run proposed (a first vote for others is an edit)."""
    if not votes:
        return Progress(rule.group, rule.required, (), (), proposed_digest)
    digest = votes[-1].args_digest
    current: dict[str, ApprovalVote] = {}
    for vote in votes:
        if vote.args_digest == digest:
            current.setdefault(vote.approver, vote)
    others = tuple(v for v in votes if v.args_digest != digest)
    return Progress(rule.group, rule.required, tuple(current.values()), others, proposed_digest)


def as_voted(record: ApprovalRecord, votes: Sequence[ApprovalVote]) -> ApprovalRecord:
    """A pending approval as its current set votes on it, for display: when the latest vote
    is for edited arguments, they (as ``approved_args`` / ``approved_digest``, what a decided
    row shows) with their tier and amount; otherwise the record itself. Never stored."""
    if record.status != "pending" or not votes or votes[-1].args_digest == record.args_digest:
        return record
    latest = votes[-1]
    return record.with_(
        approved_args=latest.approved_args,
        approved_digest=latest.args_digest,
        tier=latest.tier,
        amount_usd=latest.amount_usd,
    )


def count_for(votes: Sequence[ApprovalVote], digest: str) -> list[str]:
    """The distinct approvers of the arguments ``digest`` names, in the order they voted."""
    return list(dict.fromkeys(v.approver for v in votes if v.args_digest == digest))


async def standing(
    store: Approvals,
    rules: Iterable[DualControl],
    record: ApprovalRecord,
    operation: str | None,
) -> tuple[DualControl, Progress] | None:
    """The rule an approval needs and its progress, or None (no rule applies)."""
    rule = rule_for(rules, record.amount_usd, operation)
    if rule is None:
        return None
    votes = await store.list_votes(record.approval_id)
    return rule, progress(rule, votes, record.args_digest)
