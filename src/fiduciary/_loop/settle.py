"""Settling the calls a run left open: decided approvals, calls cut off by a crash, a cancel.

Under the principal's lock, each open call of the last turn is closed: an approval decided
meanwhile runs exactly the approved arguments (after checking the row against the
``pending_action`` the person was shown), is refused (denied, expired, altered), or records
the result its client reported; a call a crash interrupted runs again if it is replayable,
else the ledger says what became of it. A cancel closes every open call without running any.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from .._logs import logger
from ..capabilities import args_digest
from ..delegation import settling
from ..events import ActionResolvedDraft, GuardNote, RunFailedDraft, TurnRetractedDraft
from ..exceptions import FiduciaryError
from ..gates import Attempt, ParsedCall
from ..models.base import ToolUsePart
from ..stores.base import ApprovalRecord
from .after import conclude, reopen_refreshes
from .binding import TAMPERED, mismatch
from .dispatch import dispatch, reject
from .regenerating import regenerate
from .state import Drive

__all__ = ["cancel", "settle"]

log = logger("fiduciary.loop")

NOT_APPROVED = (
    "Nobody approved this action in time; it was not executed. Ask the person whether they "
    "still want it."
)
# a question the person left unanswered (fiduciary.questions): the run goes on without it
NO_ANSWER = (
    "No answer: the person did not answer in time. Go on without the answer if you can, "
    "else say what you needed to know and stop."
)


async def settle(d: Drive) -> list[ApprovalRecord]:
    """Close the calls left open; the approvals still pending."""
    pending: list[ApprovalRecord] = []
    gates = d.rt.gates
    # a child run a delegate call starts here is driven after the lock (fiduciary.delegation)
    with settling():
        async with d.rt.principal_lock(d.principal.actor_id) as held:
            d.held = held
            try:
                await reopen_refreshes(d)
                for use in d.t.unresolved:
                    approval_id = d.t.approvals.get(use.id)
                    if approval_id is not None:
                        record = await _settle_approval(d, use, approval_id)
                        if record is not None:
                            pending.append(record)
                        continue
                    call = gates.parse(use.id, use.name, use.input)
                    cap = call.cap
                    if cap is not None and cap.replay.value != "safe" and call.args is not None:
                        resumed = d.attempt(call, recovery="replayed")
                        if await gates.resumable(resumed):  # its handler settles it
                            await conclude(d, await gates.execute(resumed))
                            continue
                        if d.end(await gates.recorded(d.attempt(call))):
                            continue
                        record = await dispatch(d, call)
                    else:
                        # a call left open by a run awaiting its child (a delegate call) is no
                        # replay: it runs again once the child has ended (fiduciary.delegation)
                        waited = d.run.status == "awaiting_child"
                        record = await dispatch(d, call, recovery=None if waited else "replayed")
                    if record is not None:
                        pending.append(record)
                await d.barrier()  # committed before the next holder reads the daily spend
            finally:
                d.held = None
    return pending


def _resolved(d: Drive, use: ToolUsePart, record: ApprovalRecord) -> None:
    """``action_resolved`` for a decided approval, unless the log has it already."""
    decision = record.status
    if record.approval_id in d.t.resolved or decision == "pending":
        return
    d.emit(
        ActionResolvedDraft(
            approval_id=record.approval_id,
            tool_use_id=use.id,
            decision=decision,
            by=record.decided_by,
            reason=record.reason,
            edits=d.rt.redactor.redact(_edits(record)),
            args_digest=record.approved_digest,
        )
    )


async def _settle_approval(d: Drive, use: ToolUsePart, approval_id: UUID) -> ApprovalRecord | None:
    store, gates, clock = d.rt.store, d.rt.gates, d.rt.clock
    record = await store.get_approval(approval_id)
    if record is None:  # the log says pending but the row is gone: treat as expired
        call = ParsedCall(use.id, use.name, use.input, gates.get(use.name))
        reject(d, call, "expired", "The approval request no longer exists.")
        return None
    if record.status == "pending":
        if clock.now() < record.expires_at:
            return record
        expired = record.with_(status="expired", decided_at=clock.now())
        if not await store.decide_approval(expired):
            record = await store.get_approval(approval_id) or expired
        else:
            record = expired
        if record.status == "pending":
            return record
    if record.status == "superseded":  # the person asked for fresh arguments
        return await regenerate(d, use, record)
    call = gates.parse(use.id, use.name, record.approved_args or record.args)
    _resolved(d, use, record)
    if record.status == "denied" and record.executor == "person":
        reason = f" ({record.reason})" if record.reason else ""
        reject(d, call, "denied", f"The person did not answer{reason}. Go on without it.")
        return None
    if record.status == "denied":
        reason = f": {record.reason}" if record.reason else ""
        reject(
            d,
            call,
            "denied",
            f"The person declined this action{reason}. It was not executed; do not retry "
            "it unless they ask again.",
        )
        return None
    if record.status == "expired":
        reject(d, call, "expired", NO_ANSWER if record.executor == "person" else NOT_APPROVED)
        return None
    shown = d.t.pending_actions.get(use.id)
    why = mismatch(record, shown if shown and shown.approval_id == approval_id else None, None)
    if why is None and record.principal != d.principal.actor_id:
        why = "it names another principal"
    if why is not None:  # the row was altered: run nothing, say so, keep it in the log
        log.error("approval %s not executed: its row was altered (%s)", approval_id, why)
        reject(d, gates.parse(use.id, use.name, use.input), "tampered", TAMPERED.format(why=why))
        return None
    if call.cap is None or call.args is None:
        reject(d, call, "not_allowed", f"{use.name} is no longer available; it was not executed.")
        return None
    attempt = Attempt(d.scope, call, tier=record.tier, amount_usd=record.amount_usd)
    if record.status == "client_result":
        d.record(gates.client_result(attempt, record.client_result))
        return None
    # approved: execute exactly the approved arguments
    if args_digest(call.args_json) != record.approved_digest:
        reject(
            d,
            call,
            "denied",
            "The approved arguments do not match what was approved; not executed.",
        )
        return None
    if record.approved_digest != record.args_digest:
        why = await _repriced(d, attempt, record)
        if why is not None:  # rewritten behind the decision: run nothing, say so
            log.error("approval %s not executed: its row was altered (%s)", approval_id, why)
            reject(d, call, "tampered", TAMPERED.format(why=why))
            return None
    edits = _edits(record)
    # the notes the person saw on the card go to the model with the result
    notes = list(d.t.notes.get(use.id, ()))
    if edits:
        shown_edits = d.rt.redactor.redact(edits)
        message = f"The person edited the call before approving it: {shown_edits}."
        notes.append(GuardNote(guard="approval", verdict="hint", message=message))
    attempt.notes = tuple(notes)
    await conclude(d, await gates.execute(attempt))
    return None


async def _repriced(d: Drive, attempt: Attempt, record: ApprovalRecord) -> str | None:
    """Why an edit's row does not hold (None: it does). The log shows the arguments proposed,
    not an edit, so an edit's amount (priced at the decision) is priced again here from the
    approved arguments: a row whose arguments were rewritten with a matching digest but not
    its amount, or with an amount whose tier the row does not have, runs nothing."""
    gates, cap = d.rt.gates, attempt.cap
    if cap is None or attempt.args is None:
        return None
    try:
        amount = await cap.amount(attempt.args, gates.context(attempt))
    except FiduciaryError as exc:
        return f"its approved arguments cannot be priced: {exc}"
    if amount != record.amount_usd:
        return "its amount is not the amount of its approved arguments"
    needed = gates.policy.decide(cap, amount, origin=attempt.scope.origin()).tier
    if needed == "deny" or (needed == "explicit" and record.tier != "explicit"):
        return "its tier is lower than its approved arguments need"
    return None


async def cancel(d: Drive, *, by: str, reason: str) -> None:
    """End the run for good (``Agent.cancel``, which holds the principal's lock around this):
    close every open call, then fail it ``aborted`` with status ``cancelled``. Nothing is
    executed here."""
    store, gates, clock = d.rt.store, d.rt.gates, d.rt.clock
    if d.t.partial_from is not None:
        d.emit(TurnRetractedDraft(from_seq=d.t.partial_from))
    told = f"The run was cancelled by {by}" + (f" ({reason})" if reason else "")
    for use in list(d.t.unresolved):
        args: Any = use.input
        approval_id = d.t.approvals.get(use.id)
        record = None if approval_id is None else await store.get_approval(approval_id)
        if record is not None and record.status == "pending":
            denied = record.with_(
                status="denied",
                decided_by=by,
                decided_at=clock.now(),
                reason="the run was cancelled",
            )
            if await store.decide_approval(denied):
                record = denied
            else:  # decided meanwhile: record what was decided
                record = await store.get_approval(denied.approval_id)
        if record is not None:
            args = record.approved_args or record.args
            _resolved(d, use, record)
        call = gates.parse(use.id, use.name, args)
        if call.cap is not None and call.args is not None:
            if record is not None and record.status == "client_result":
                # the client did it: its report is the outcome
                attempt = Attempt(d.scope, call, tier=record.tier, amount_usd=record.amount_usd)
                d.record(gates.client_result(attempt, record.client_result))
                continue
            # a write already in the ledger may have acted: say what is known
            if d.end(await gates.recorded(d.attempt(call), resuming=False)):
                continue
        reject(d, call, "cancelled", f"{told}; this call was not executed.")
    for start in list(d.t.refreshing.values()):  # a refresh a crash cut off: ended, not run
        call = gates.parse(start.tool_use_id, start.name, start.input)
        reject(d, call, "cancelled", f"{told}; this read was not run again.")
    message = f"cancelled by {by}" + (f": {reason}" if reason else "")
    d.emit(RunFailedDraft(reason="aborted", message=message), status="cancelled")
    await d.barrier()


def _edits(record: ApprovalRecord) -> dict[str, Any] | None:
    if record.approved_args is None:
        return None
    changed = {k: v for k, v in record.approved_args.items() if record.args.get(k) != v}
    return changed or None
