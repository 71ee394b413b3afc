"""Dispatch: the calls of a model turn through the gates, and their verdicts into the log.

A read starts as soon as its arguments are complete and runs beside the others of its turn
(``concurrent``: it never waits for a person). Writes run after the turn, one at a time in the
model's order, under the principal's lock; before each, the earlier writes' rows are committed
(they count toward the daily limit), and before its effect the log is durable and the lock
verified (the scope's ``before_effect``).
"""

from __future__ import annotations

from typing import Literal

from ..canvas import CANVAS_FLAG, CanvasInput
from ..context.todos import TODO_FLAG, TodoList
from ..events import CanvasDraft, RejectReason, TodoUpdateDraft, ToolCallStartDraft
from ..gates import Outcome, ParsedCall, Verdict
from ..stores.base import ApprovalRecord
from .after import conclude
from .state import Drive

__all__ = ["dispatch", "dispatch_writes", "reject", "run_read", "start"]


def start(d: Drive, call: ParsedCall) -> None:
    d.emit(
        ToolCallStartDraft(
            tool_use_id=call.tool_use_id,
            name=call.name,
            input=d.rt.gates.shown(call),
            args_digest=call.digest,
            kind=call.cap.kind.value if call.cap else None,
        )
    )


def reject(d: Drive, call: ParsedCall, reason: RejectReason, message: str) -> None:
    """The call does not run, for a reason the loop knows (a limit, a decision, a cancel)."""
    d.record(d.rt.gates.refuse(d.attempt(call), reason, message))


async def run_read(d: Drive, call: ParsedCall) -> None:
    verdict = await d.rt.gates.run(d.attempt(call, concurrent=True))
    await conclude(d, verdict)
    _shown(d, call, verdict)


def _shown(d: Drive, call: ParsedCall, verdict: Verdict) -> None:
    """What a call that ran shows the person besides its result: a to-do list, a canvas."""
    if not isinstance(verdict, Outcome) or verdict.is_error or call.cap is None:
        return
    if TODO_FLAG in call.cap.flags and isinstance(call.args, TodoList):
        d.emit(TodoUpdateDraft(tool_use_id=call.tool_use_id, todos=list(call.args.todos)))
    if CANVAS_FLAG in call.cap.flags and isinstance(call.args, CanvasInput):
        d.emit(_canvas(d, call.tool_use_id, call.args))


def _canvas(d: Drive, tool_use_id: str, args: CanvasInput) -> CanvasDraft:
    """The canvas's document as the person sees it: redacted like every text of the run."""
    redact = d.rt.redactor.redact_text
    title, html = redact(args.title), redact(args.document())
    return CanvasDraft(tool_use_id=tool_use_id, title=title, kind=args.canvas_kind, html=html)


async def dispatch(
    d: Drive, call: ParsedCall, recovery: Literal["replayed"] | None = None
) -> ApprovalRecord | None:
    """One call, in the serial path: its verdict recorded; the approval it waits for, if any."""
    # earlier writes' audit rows count toward the daily limit: commit them first
    if d.writer.spending:
        await d.barrier()
    verdict = await d.rt.gates.run(d.attempt(call, recovery=recovery))
    record = await conclude(d, verdict)
    _shown(d, call, verdict)  # a read re-run after a crash shows what it would have
    return record


async def dispatch_writes(d: Drive, calls: list[ParsedCall]) -> list[ApprovalRecord]:
    pending: list[ApprovalRecord] = []
    if not calls:
        return pending
    async with d.rt.principal_lock(d.principal.actor_id) as held:
        d.held = held
        try:
            for call in calls:
                record = await dispatch(d, call)
                if record is not None:
                    pending.append(record)
            # what the writes spent is committed before the next holder reads the daily spend
            await d.barrier()
        finally:
            d.held = None
    return pending
