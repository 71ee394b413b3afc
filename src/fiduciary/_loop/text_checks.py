"""The text guards of a drive (``fiduciary.text_guards``): the person's message before the
model is first asked about it, the final text before the run completes with it."""

from __future__ import annotations

from ..events import RunFailedDraft, TextGuardFiredDraft
from ..text_guards import TextCall, TextPhase, run_text_guards
from .state import Drive

__all__ = ["blocked"]


async def blocked(d: Drive, phase: TextPhase, text: str) -> bool:
    """Ask the guards of ``phase`` about ``text``; record each verdict that did not pass; on a
    block, fail the run (``guard_blocked``) and say so."""
    guards = d.rt.text_guards
    if not guards:
        return False
    call = TextCall(
        text=text, phase=phase, run_id=d.run_id, principal=d.run.principal, history=d.t.history
    )
    outcome = await run_text_guards(guards, call)
    redact = d.rt.redactor.redact_text
    for guard, verdict in outcome.fired:
        kind = verdict.kind
        assert kind != "pass"  # (run_text_guards keeps no passing verdict)
        d.emit(
            TextGuardFiredDraft(
                guard=guard.name,
                tier=guard.tier,
                phase=phase,
                verdict=kind,
                message=redact(verdict.message),
                for_person=redact(verdict.for_person),
            )
        )
    if outcome.block is None:
        return False
    guard, verdict = outcome.block
    what = "the message" if phase == "input" else "the answer"
    message = redact(f"{what} was blocked by {guard.name}: {verdict.message}")
    d.emit(RunFailedDraft(reason="guard_blocked", message=message), status="failed")
    return True
