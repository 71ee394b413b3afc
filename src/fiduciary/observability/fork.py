"""Fork: a new, real run whose history is a recorded run's log up to a seq.

The fork's log starts with the original's events up to ``at_seq`` (copied under the fork's id;
its ``run_started`` says ``fork_of`` and ``fork_at``, its title begins "FORK of"), then goes on
as any run: its writes pass the gates, ask a person, and execute (it is not a replay). A typical
use is "what if the person had decided otherwise": fork at the ``pending_action`` and
``decide`` it another way.

A cut is valid where the run could have stopped: not inside a model turn (text, thinking or
calls streamed and no ``turn_complete`` yet) and not inside a compaction; a cut at the run's
end is refused (a finished run continues with a new message, not by forking it). Approvals
still pending at the cut are created afresh for the fork (new ids, the same terms, a new
deadline); calls of the last turn that had not ended at the cut are dispatched again, through
the gates, as a resumed run dispatches them (under the fork's own ledger keys).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal
from uuid import UUID, uuid4

from .._loop import Transcript
from ..agent import Agent
from ..capabilities import Principal
from ..events import (
    ActionResolved,
    Event,
    PendingAction,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from ..exceptions import RunError
from ..stores.base import RunStatus, existing_run
from .replay import derived_run

__all__ = ["Decide", "fork", "parse_decide", "valid_cut"]

Decide = Literal["approve", "deny"] | Mapping[str, Any]
"""``approve``, ``deny``, or the edits to approve with (``edit:{...}`` on the command line)."""


def parse_decide(text: str) -> Decide:
    """``approve``, ``deny`` or ``edit:{json}`` as ``fork``'s ``decide``."""
    import json

    if text in ("approve", "deny"):
        return "approve" if text == "approve" else "deny"
    if text.startswith("edit:"):
        try:
            edits = json.loads(text.removeprefix("edit:"))
        except ValueError as exc:
            raise RunError("invalid", f"edit:{{...}} needs a JSON object: {exc}") from None
        if not isinstance(edits, dict) or not edits:
            raise RunError("invalid", "edit:{...} needs a non-empty JSON object of fields")
        return edits
    raise RunError("invalid", f"decide must be approve, deny or edit:{{json}}, not {text!r}")


def valid_cut(events: Sequence[Event], at_seq: int) -> list[PendingAction]:
    """Refuse, with ``RunError("invalid")``, a cut the run could not have stopped at; else the
    approvals pending at it."""
    if not events or at_seq < 2 or at_seq > events[-1].seq:
        last = events[-1].seq if events else 0
        raise RunError("invalid", f"--at must be a seq from 2 to {last}, not {at_seq}")
    head = [e for e in events if e.seq <= at_seq]
    transcript = Transcript()
    for event in head:
        transcript.apply(event)
    last_event = head[-1]
    if isinstance(last_event, RunCompleted | RunFailed):
        raise RunError(
            "invalid",
            f"seq {at_seq} is the run's end ({last_event.type}); continue the run with a new "
            "message instead, or fork it earlier",
        )
    if transcript.partial_from is not None:
        raise RunError(
            "invalid",
            f"seq {at_seq} is inside a model turn (it began at seq {transcript.partial_from}); "
            "fork at its turn_complete or before the turn",
        )
    if transcript.compacting is not None:
        raise RunError("invalid", f"seq {at_seq} is inside a compaction; fork after its end")
    resolved = {e.approval_id for e in head if isinstance(e, ActionResolved)}
    pending: list[PendingAction] = []
    for use in transcript.unresolved:
        action = transcript.pending_actions.get(use.id)
        if action is not None and action.approval_id not in resolved:
            pending.append(action)
    return pending


async def fork(
    agent: Agent,
    run_id: UUID,
    at_seq: int,
    *,
    decide: Decide | None = None,
    by: Principal | str | None = None,
    reason: str = "",
) -> UUID:
    """A new run whose history is ``run_id``'s log up to ``at_seq``, driven on from there; its id.

    ``decide`` decides the approval pending at the cut (``approve``, ``deny``, or a mapping of
    edits to approve with) as ``by`` (the run's principal by default), through the gates as any
    decision; without it the fork waits for a person like the original did. The fork is then
    driven to its next stop, as ``Agent.resume`` does. Raises ``RunError`` (``not_found``,
    ``invalid``: not a valid cut, or nothing to decide) and ``ApprovalError`` from the decision.
    """
    original = await existing_run(agent.store, run_id)
    events = await agent.store.read_events(run_id)
    pending = valid_cut(events, at_seq)
    if decide is not None and not pending:
        raise RunError("invalid", f"at seq {at_seq} no approval is pending: nothing to decide")
    if decide is not None and not isinstance(decide, str) and len(pending) > 1:
        raise RunError(
            "invalid",
            f"at seq {at_seq} {len(pending)} approvals are pending; edits apply to one: decide "
            "approve or deny, or fork without deciding and decide each",
        )
    started = events[0]
    if not isinstance(started, RunStarted):
        raise RunError("invalid", f"run {run_id} has no run_started event")
    rid = uuid4()
    now = agent.clock.now()
    fresh = {
        e.approval_id: uuid4()
        for e in events
        if e.seq <= at_seq and isinstance(e, PendingAction | ActionResolved)
    }
    expires = {
        p.approval_id: now + timedelta(seconds=agent.policy.approval_ttl_seconds) for p in pending
    }
    copied = [_copied(e, rid, fresh, expires, run_id, at_seq) for e in events if e.seq <= at_seq]
    status: RunStatus = "awaiting_approval" if pending else "running"
    if pending and all(p.executor != "server" for p in pending):
        person = any(p.executor == "person" for p in pending)
        status = "awaiting_input" if person else "awaiting_client_result"
    title = f"FORK of {str(run_id)[:8]} at seq {at_seq}: {original.title}"
    run = derived_run(agent, original, rid, title, now)
    await agent.store.create_run(run, copied)
    approvals = []
    for action in pending:
        row = await agent.store.get_approval(action.approval_id)
        if row is None:
            raise RunError("invalid", f"the approval of seq {action.seq} is not in the store")
        approvals.append(
            row.with_(
                approval_id=fresh[action.approval_id],
                run_id=rid,
                status="pending",
                created_at=now,
                expires_at=expires[action.approval_id],
                decided_by=None,
                decided_at=None,
                reason=None,
                approved_args=None,
                approved_digest=None,
                client_result=None,
            )
        )
    await agent.store.commit(rid, epoch=1, status=status, approvals=approvals)
    await agent.store.release(rid, epoch=1)
    who = by if by is not None else Principal(original.principal, frozenset(original.scopes))
    for record in approvals:
        if decide == "deny":
            await agent.deny(record.approval_id, by=who, reason=reason or "denied in a fork")
        elif decide is not None:
            await agent.approve(
                record.approval_id,
                by=who,
                edits=None if isinstance(decide, str) else decide,
                confirm_amount=record.amount_usd,
                args_digest=record.args_digest,
            )
    async for _ in agent.resume(rid):
        pass
    return rid


def _copied(
    event: Event,
    rid: UUID,
    fresh: Mapping[UUID, UUID],
    expires: Mapping[UUID, Any],
    origin: UUID,
    at_seq: int,
) -> Event:
    changes: dict[str, Any] = {"run_id": rid}
    if isinstance(event, RunStarted):
        changes.update(fork_of=origin, fork_at=at_seq)
    elif isinstance(event, PendingAction | ActionResolved):
        changes.update(approval_id=fresh[event.approval_id])  # the fork's own approvals
        if isinstance(event, PendingAction) and event.approval_id in expires:
            changes.update(expires_at=expires[event.approval_id])  # pending: a new deadline
    return event.model_copy(update=changes)
