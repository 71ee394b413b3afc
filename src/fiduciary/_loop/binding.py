"""Private: an approval row binds to the pending action the run's log recorded.

The approvals table is a working copy: ``approve`` reads it, the loop executes from it. The
``pending_action`` event in the run's log is the committed truth of what the person was shown.
A row that disagrees with it (its arguments, their digest, the tier, the amount, the fields the
person may edit, the principal, the deadline) was changed behind fiduciary's back: it is refused
at every decision and before anything executes.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..capabilities import args_digest
from ..events import Event, PendingAction, RunStarted
from ..stores.base import ApprovalRecord

__all__ = ["TAMPERED", "logged_action", "mismatch"]

TAMPERED = (
    "The stored approval does not match the action recorded in the run's log ({why}); "
    "it was not executed. Nothing was changed; ask the person whether they still want it."
)

_TIER_ORDER = {"confirm": 0, "explicit": 1}


def logged_action(
    events: Iterable[Event], record: ApprovalRecord
) -> tuple[PendingAction | None, str | None]:
    """The ``pending_action`` of ``record`` in a run's log, and the run's principal."""
    shown: PendingAction | None = None
    principal: str | None = None
    for event in events:
        if isinstance(event, RunStarted):
            principal = event.principal
        elif isinstance(event, PendingAction) and event.approval_id == record.approval_id:
            shown = event
    return shown, principal


def mismatch(
    record: ApprovalRecord, shown: PendingAction | None, principal: str | None
) -> str | None:
    """Why ``record`` does not bind to ``shown`` (None: it does).

    A pending row must equal what the log recorded. A decided row may differ only as a decision
    changes it: the approved arguments (with their digest) differ from the shown ones in
    modifiable fields only, and an edit may raise the tier and re-price the amount, never lower
    the tier. A client's result is recorded against the shown arguments exactly.
    """
    if shown is None:
        return "the log records no such pending action"
    if (
        shown.tool_use_id != record.tool_use_id
        or shown.name != record.capability
        or shown.executor != record.executor
        or (principal is not None and principal != record.principal)
    ):
        return "it names another call, capability or principal"
    if args_digest(record.args) != record.args_digest or record.args_digest != shown.args_digest:
        return "its arguments differ from the ones shown"
    if tuple(record.modifiable_fields) != tuple(shown.modifiable_fields):
        return "its modifiable fields differ"
    if record.expires_at != shown.expires_at:
        return "its deadline differs"
    if record.status == "pending":
        return _same_terms(record, shown)
    if record.status not in ("approved", "client_result"):
        return None  # denied or expired: nothing will run
    approved = record.approved_args
    if approved is None or record.approved_digest is None:
        return "it has no approved arguments"
    if args_digest(approved) != record.approved_digest:
        return "its approved arguments differ from their digest"
    if record.approved_digest == shown.args_digest:
        return _same_terms(record, shown)
    if record.status == "client_result":
        return "the client's result is recorded against other arguments"
    edited = {k for k in set(approved) | set(record.args) if approved.get(k) != record.args.get(k)}
    if not edited <= set(shown.modifiable_fields):
        return "its approved arguments change fields the person could not edit"
    if _TIER_ORDER[record.tier] < _TIER_ORDER[shown.tier]:
        return "its tier is lower than the one shown"
    return None


def _same_terms(record: ApprovalRecord, shown: PendingAction) -> str | None:
    if record.tier != shown.tier:
        return "its tier differs from the one shown"
    if record.amount_usd != shown.amount_usd:
        return "its amount differs from the one shown"
    return None
