"""The guards of one call (steps 4 and 10 of ``fiduciary.gates``): asked in tier order, and
each note and block reported to the run as a ``guard_fired`` (redacted) before the verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from ..events import GuardFiredDraft
from ..guards import Guard, GuardCall, GuardOutcome, run_guards
from .attempt import Attempt

__all__ = ["guarded"]


async def guarded(
    guards: Sequence[Guard],
    a: Attempt,
    phase: Literal["pre", "post"],
    output: Any,
    *,
    now: datetime,
    redact: Callable[[str], str],
) -> GuardOutcome:
    """The guards' outcome for the attempt in ``phase`` (``output``: the call's, after it)."""
    if not guards:
        return GuardOutcome()
    call, scope = a.call, a.scope
    gcall = GuardCall(
        capability=a.cap,
        args=a.args.model_dump(mode="json"),  # its own copy: guards are host code
        args_digest=call.digest,
        tool_use_id=call.tool_use_id,
        run_id=scope.run_id,
        principal=scope.principal,
        history=scope.history,
        now=now,
        output=output,
    )
    outcome = await run_guards(guards, gcall, phase)
    for guard, verdict in outcome.notes:
        await scope.report(
            GuardFiredDraft(
                tool_use_id=call.tool_use_id,
                guard=guard.name,
                tier=guard.tier,
                phase=phase,
                verdict="warn" if verdict.kind == "warn" else "hint",
                message=redact(verdict.message),
                for_person=redact(verdict.for_person),
            )
        )
    if outcome.block is not None:
        name, tier, verdict = outcome.block
        await scope.report(
            GuardFiredDraft(
                tool_use_id=call.tool_use_id,
                guard=name,
                tier=tier,
                phase=phase,
                verdict="block",
                message=redact(verdict.message),
                for_person=redact(verdict.for_person),
            )
        )
    return outcome
