"""After a call ran: its post-execution guards, then the reads it refreshes.

Both follow the call's ``tool_call_end`` in the log, so a reader sees the result first and
what was found about it next:

- **post guards** (``Guard.phase == "post"``), asked in tier order (safety > financial > ux)
  with the call's output; each hint or warning is a ``post_guard_fired`` event (a block is
  a warning: nothing can be undone here). The fold adds its message to the call's result as
  the model reads it; consoles show it beside the result.
- **refresh** (``@capability(refresh=[...])``): each named read is run through the gates as a
  read of its own (``tool_call_start`` with ``refresh_of``, then its ``tool_call_end``), and
  the fold adds its result to the refreshed call's, so the model sees the fresh state without
  asking. A name the run may not call, or that is not a read, is skipped.

Only a call whose handler ran here and succeeded has either (``Outcome.ran``): a result the
ledger recorded before a crash, or an error, has none. A crash between the call's end and
these events loses them (they are advice, never an effect); a refresh a crash cut off after
its start runs again when the run resumes (``reopen_refreshes``), so every start has its end.
"""

from __future__ import annotations

from .._logs import logger
from ..events import PostGuardFiredDraft, ToolCallStartDraft
from ..gates import Outcome, Verdict
from ..guards import GuardCall, run_guards
from ..stores.base import ApprovalRecord
from .state import Drive

__all__ = ["conclude", "reopen_refreshes"]

log = logger("fiduciary.loop")


async def conclude(d: Drive, verdict: Verdict) -> ApprovalRecord | None:
    """Record a call's verdict; after a call that ran, its post guards and its refreshes.
    The approval the call waits for, if any."""
    waiting = d.record(verdict)
    if isinstance(verdict, Outcome) and verdict.ran is not None:
        await post_guards(d, verdict, verdict.ran[0])
        await refresh(d, verdict)
    return waiting


async def post_guards(d: Drive, outcome: Outcome, output: object) -> None:
    gates, call = d.rt.gates, outcome.call
    if call.cap is None or not any(g.phase == "post" for g in gates.guards):
        return
    checked = GuardCall(
        capability=call.cap,
        args=dict(call.args_json),  # its own copy: guards are host code
        args_digest=call.digest,
        tool_use_id=call.tool_use_id,
        run_id=d.run_id,
        principal=d.principal,
        history=d.scope.history,
        now=d.rt.clock.now(),
        output=output,
    )
    try:
        found = await run_guards(gates.guards, checked, "post")
    except Exception:  # advice after the effect: a failing guard must not fail the run
        log.exception("a post-execution guard of %s failed", call.name)
        return
    redact = d.rt.redactor.redact_text
    for guard, note in found.notes:
        d.emit(
            PostGuardFiredDraft(
                tool_use_id=call.tool_use_id,
                name=call.name,
                guard=guard.name,
                tier=guard.tier,
                verdict="warn" if note.kind == "warn" else "hint",
                message=redact(note.message),
                for_person=redact(note.for_person),
            )
        )


async def refresh(d: Drive, outcome: Outcome) -> None:
    gates, cap = d.rt.gates, outcome.call.cap
    if cap is None:
        return
    for name in cap.refresh:
        target = gates.get(name)
        if target is None or target.is_write or name not in d.allowed:
            log.warning("%s: cannot refresh %s in this run (not one of its reads)", cap.name, name)
            continue
        call = gates.parse(f"{outcome.call.tool_use_id}-refresh-{name}", name, {})
        d.emit(
            ToolCallStartDraft(
                tool_use_id=call.tool_use_id,
                name=name,
                input=gates.shown(call),
                args_digest=call.digest,
                kind=target.kind.value,
                refresh_of=outcome.call.tool_use_id,
            )
        )
        d.record(await gates.run(d.attempt(call, concurrent=True)))


async def reopen_refreshes(d: Drive) -> None:
    """Run again the refreshing reads a crash cut off (started, never ended): reads are safe
    to repeat, and every started call ends."""
    for start in list(d.t.refreshing.values()):
        call = d.rt.gates.parse(start.tool_use_id, start.name, start.input)
        d.record(await d.rt.gates.run(d.attempt(call, recovery="replayed", concurrent=True)))
