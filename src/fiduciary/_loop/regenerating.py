"""Private: a pending call made anew, because the person asked for fresh arguments.

``Agent.regenerate`` only decides the approval row ``superseded``. The drive that takes the
decision up records it (``action_resolved`` superseded, with its audit row), asks the
capability's ``regenerate`` for fresh arguments made from the old ones (a new quote), and
puts the same call (its tool_use_id) through the gates again: guards, authorization, policy,
never below the tier the old approval had. The new ``pending_action`` names the approval it
replaces; it and its approval row land in the same commit as the old one's end.

A crash before that commit leaves the old row superseded and its run's wake marker set: the
next drive does it again (the hook only asks for a quote; nothing was executed). So the run
ends up with exactly one approval that can be approved, never two. The model is not asked
again: the call is the one it made, with fresh inputs the person asked for; it hears of the
regeneration with the call's result.
"""

from __future__ import annotations

from dataclasses import replace

from .._logs import logger
from ..events import ActionResolvedDraft, GuardNote
from ..models.base import ToolUsePart
from ..stores.base import ApprovalRecord, AuditRecord
from .dispatch import reject
from .state import Drive

__all__ = ["regenerate"]

log = logger("fiduciary.loop")


async def regenerate(d: Drive, use: ToolUsePart, record: ApprovalRecord) -> ApprovalRecord | None:
    """The superseded ``record`` ended in the log, and its call waiting for a new approval
    with fresh arguments (that approval), or ended with the reason it cannot."""
    gates = d.rt.gates
    old = gates.parse(use.id, use.name, record.args)
    audit: tuple[AuditRecord, ...] = ()
    if old.cap is not None:
        row = gates.audit_row(
            d.attempt(old), "superseded", record.tier, record.amount_usd, None, None
        )
        audit = (row,)
    if record.approval_id not in d.t.resolved:
        d.emit(
            ActionResolvedDraft(
                approval_id=record.approval_id,
                tool_use_id=use.id,
                decision="superseded",
                by=record.decided_by,
                reason=record.reason,
            ),
            audit=audit,
        )
    cap = old.cap
    if cap is None or old.args is None or cap.regenerate is None:
        reject(d, old, "not_allowed", f"{use.name} can no longer be made anew; not executed.")
        return None
    try:
        fresh = await cap.regenerated(old.args, gates.context(d.attempt(old)))
    except Exception as exc:  # the hook is host code: its failure ends the call, told
        log.warning("%s: fresh arguments could not be made: %s", use.name, exc)
        reject(
            d,
            old,
            "invalid_input",
            f"The person asked for fresh arguments (a new quote) and they could not be made: "
            f"{exc}. Nothing was executed.",
        )
        return None
    attempt = d.attempt(gates.parse(use.id, use.name, fresh))
    refused = await gates.admit(attempt)
    if refused is not None:
        d.record(refused)
        return None
    if attempt.tier == "auto":  # its spend was reserved as if it ran now; it waits instead
        await d.rt.store.release_autonomous(gates.context(attempt).idempotency_key)
    # never below the tier the person was shown
    attempt.tier = "explicit" if "explicit" in (attempt.tier, record.tier) else "confirm"
    note = GuardNote(
        guard="regenerated",
        verdict="hint",
        message=f"The person had this call made anew with fresh arguments: {fresh}.",
        for_person="Made anew with fresh arguments; the earlier card was withdrawn.",
    )
    attempt.notes = (*attempt.notes, note)
    pending = await gates.pend(attempt)
    draft = pending.draft.model_copy(update={"regenerated_from": record.approval_id})
    return d.record(replace(pending, draft=draft))
