"""Steps 7-11 of the gates (``fiduciary.gates``): an admitted or approved call executed at most
once through the ledger (fenced by the run's lease epoch), within its timeout, its output
validated, the post-guards' hints added, redacted and cut to the result budget; and what the
ledger recorded of a call, when it must not run again (a crash, a second attempt, a cancel).
Every path returns an ``Outcome`` with its audit row; a call that may have acted and did not
answer is an honest ``unknown``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from .._logs import logger
from .._render import render_result
from ..capabilities import CallContext, Capability, Replay
from ..clock import Clock
from ..exceptions import CapabilityError
from ..redaction import Redactor
from ..steps import StepBooks
from ..stores.base import AuditRecord, LedgerEntry, LedgerFinish, Store
from .attempt import Attempt, AwaitingRun, Outcome, error_content

__all__ = ["Execution"]

log = logger("fiduciary.gates")


class Execution:
    """What the gates do once a call is admitted (or approved): ``Gates.execute`` and the
    ledger's answers for a call that must not run again."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        redactor: Redactor,
        default_result_chars: int,
        context: Callable[[Attempt], CallContext],
        audit_row: Callable[..., AuditRecord],
    ) -> None:
        self.store = store
        self.clock = clock
        self.redactor = redactor
        self.default_result_chars = default_result_chars
        self.context = context  # the gates' (one per attempt: its idempotency key)
        self.audit_row = audit_row

    async def execute(self, a: Attempt) -> Outcome:
        """Run an admitted (or approved) call; not ``concurrent``, after the scope's ``begin``
        or ``before_effect``. The ledger row is fenced by the scope's lease epoch:
        ``StaleEpochError`` (the handler not entered) if the run was taken over since."""
        cap, call, args, scope = a.cap, a.call, a.args, a.scope
        ledgered = cap.replay is not Replay.SAFE
        begin = None if a.concurrent or not ledgered else scope.begin
        if not a.concurrent and begin is None:
            await scope.before_effect()
        ctx = self.context(a)
        started = time.perf_counter()
        # 7 ledger: a non-replayable call runs at most once per key, and only by the lease holder
        if ledgered:
            now = self.clock.now()
            entry = LedgerEntry(
                ctx.idempotency_key, scope.run_id, call.tool_use_id, cap.name, "started", now
            )
            if begin is not None:  # the log and the row in one durable commit
                existing = await begin(entry)
            else:
                existing = await self.store.ledger_begin(entry, epoch=scope.epoch)
            if (
                existing is not None
                and not _resumable(cap, existing)
                and not (
                    _retryable(existing)
                    and await self.store.ledger_retry(existing.key, at=entry.started_at)
                )
            ):
                return self._from_ledger(a, existing)
        # 8 execute with timeout
        try:
            try:
                async with asyncio.timeout(cap.timeout):
                    raw = await cap.invoke(args, ctx)
            except BaseException:
                # tell a handler still running in a thread (sync handlers cannot be cancelled)
                ctx.cancelled.set()
                raise
            # 9 validate output (extra fields dropped)
            output = cap.dump_output(raw)
        except AwaitingRun as exc:  # its result is another run's end: the call stays open
            return Outcome(call, "", awaiting=exc.run_id)
        except CapabilityError as exc:
            if a.tier == "auto" and cap.is_write and a.recovery is None:
                # refused before any effect: its reservation no longer counts (a replayed call
                # keeps it: the attempt before the crash may have acted)
                await self.store.release_autonomous(ctx.idempotency_key)
            message = self.redactor.redact_text(exc.message)
            return await self._failed(a, started, exc.code, message, effect_possible=False)
        except TimeoutError:
            message = f"{cap.name} did not finish within {cap.timeout:g}s."
            return await self._failed(a, started, "timeout", message, effect_possible=True)
        except ValidationError:
            log.warning("%s returned output that does not match its declared type", cap.name)
            message = f"{cap.name} ran but its result did not match its declared output."
            return await self._failed(a, started, "invalid_output", message, effect_possible=True)
        except Exception as exc:
            log.exception("handler of %s failed", cap.name)
            message = f"{cap.name} failed unexpectedly ({type(exc).__name__})."
            return await self._failed(a, started, "handler_error", message, effect_possible=True)
        # 10 guards (post) run after its tool_call_end is recorded (``_loop.after``)
        hints = [n.message for n in a.notes]
        # 11 redact, truncate, audit
        safe = self.redactor.redact(output)
        content, truncated = self.render(cap, safe, hints)
        if ledgered:
            await self._finish(a, LedgerFinish(ctx.idempotency_key, "done", self.clock.now(), safe))
        audit = self.audit_row(a, "ok", a.tier, a.amount_usd, content, ctx.idempotency_key, started)
        return Outcome(
            call,
            content,
            truncated=truncated,
            hints=hints,
            audit=audit,
            recovery=a.recovery,
            ran=(output,),
        )

    def step_books(self, a: Attempt, ctx: CallContext) -> StepBooks:
        """The ledger rows of the call's steps (``fiduciary.steps``), fenced as its own."""
        scope, cap = a.scope, a.cap

        async def begin(key: str) -> LedgerEntry | None:
            entry = LedgerEntry(
                key, scope.run_id, a.call.tool_use_id, cap.name, "started", self.clock.now()
            )
            return await self.store.ledger_begin(entry, epoch=scope.epoch)

        async def finish(
            key: str, status: Literal["done", "failed"], result: Any, error: str | None
        ) -> None:
            safe = self.redactor.redact(result)
            await self.store.ledger_finish(
                key, status=status, at=self.clock.now(), result=safe, error=error
            )

        return StepBooks(begin, finish)

    async def _failed(
        self, a: Attempt, started: float, code: str, message: str, *, effect_possible: bool
    ) -> Outcome:
        cap, key = a.cap, self.context(a).idempotency_key
        if effect_possible and cap.is_write:
            message += (
                " Its outcome is unknown: check the current state with a read capability "
                "before doing anything else, and do not simply retry."
            )
        if cap.replay is not Replay.SAFE:
            error = json.dumps({"code": code, "message": message, "unknown": effect_possible})
            await self._finish(a, LedgerFinish(key, "failed", self.clock.now(), error=error))
        content = error_content(code, message)
        # "unknown": the call may have acted (it counts toward the daily autonomous limit)
        outcome = "unknown" if effect_possible and cap.is_write else "error"
        audit = self.audit_row(a, outcome, a.tier, a.amount_usd, content, key, started)
        return Outcome(a.call, content, is_error=True, error_code=code, audit=audit)

    async def _finish(self, a: Attempt, done: LedgerFinish) -> None:
        """The ledger row's end: into the run's next commit, when the run keeps a log."""
        if a.scope.finish is not None and not a.concurrent:
            a.scope.finish(done)
            return
        await done.write(self.store)

    async def recorded(self, a: Attempt, *, resuming: bool = True) -> Outcome | None:
        """What the ledger recorded of a non-replayable call (it may have acted), or None when
        the ledger has no row for it (or the call is replayable: it can simply run again).
        ``resuming``: a started ``resume`` call is None (its handler settles it); when the
        call will not run again (a cancel), it is reported as it stands."""
        if a.cap.replay is Replay.SAFE:
            return None
        entry = await self.store.ledger_get(self.context(a).idempotency_key)
        if entry is None or (resuming and _resumable(a.cap, entry)):
            return None  # not started, or its handler settles it (replay resume)
        return self._from_ledger(a, entry)

    async def resumable(self, a: Attempt) -> bool:
        """A ``resume`` call an interruption left started: admitted before it started, it goes
        back to its handler as it was (no second admission: a guard or a policy that changed
        meanwhile must not hold or refuse what may already have happened)."""
        if a.cap.replay is not Replay.RESUME:
            return False
        entry = await self.store.ledger_get(self.context(a).idempotency_key)
        return entry is not None and _resumable(a.cap, entry)

    def _from_ledger(self, a: Attempt, entry: LedgerEntry) -> Outcome:
        """A second attempt with a key already in the ledger: never execute again."""
        started = time.perf_counter()
        cap, call = a.cap, a.call
        if entry.status == "done":
            content, truncated = self.render(cap, entry.result, [])
            audit = self.audit_row(a, "ledger", a.tier, a.amount_usd, content, entry.key, started)
            return Outcome(call, content, truncated=truncated, recovery="ledger", audit=audit)
        if entry.status == "failed":
            try:
                err = json.loads(entry.error or "{}")
            except ValueError:
                err = {}
            code = str(err.get("code") or "failed")
            content = error_content(code, str(err.get("message", "")))
            audit = self.audit_row(a, "ledger", a.tier, a.amount_usd, content, entry.key, started)
            return Outcome(
                call, content, is_error=True, error_code=code, recovery="ledger", audit=audit
            )
        message = (
            f"{cap.name} was started before an interruption and its outcome is unknown. It will "
            "not be run again. Check the current state with a read capability before anything "
            "else, then tell the person what happened."
        )
        content = error_content("outcome_unknown", message)
        audit = self.audit_row(a, "unknown", a.tier, a.amount_usd, content, entry.key, started)
        return Outcome(
            call,
            content,
            is_error=True,
            error_code="outcome_unknown",
            recovery="unknown",
            audit=audit,
        )

    def client_result(self, a: Attempt, result: Any) -> Outcome:
        """The outcome of a call its client executed, from the result the client reported."""
        cap = a.cap
        try:
            output = self.redactor.redact(cap.dump_output(result))
        except Exception:
            content = error_content("invalid_output", "The client's result was not understood.")
            audit = self.audit_row(a, "error", a.tier, a.amount_usd, content, None)
            return Outcome(a.call, content, is_error=True, error_code="invalid_output", audit=audit)
        content, truncated = self.render(cap, output, [])
        audit = self.audit_row(a, "ok", a.tier, a.amount_usd, content, None)
        return Outcome(a.call, content, truncated=truncated, audit=audit)

    def render(self, cap: Capability, output: Any, hints: Sequence[str]) -> tuple[str, bool]:
        """The text the model sees: JSON, cut to the result budget, then guard notes."""
        budget = cap.max_result_chars or self.default_result_chars
        return render_result(cap, output, hints, budget, self.redactor.redact_text)


def _resumable(cap: Capability, entry: LedgerEntry) -> bool:
    """A call left started whose handler settles it itself (replay ``resume``)."""
    return cap.replay is Replay.RESUME and entry.status == "started"


def _retryable(entry: LedgerEntry) -> bool:
    """A failure known to have had no effect (a handler's own refusal) may be attempted again."""
    if entry.status != "failed":
        return False
    try:
        error = json.loads(entry.error or "{}")
    except ValueError:
        return False
    return isinstance(error, dict) and error.get("unknown") is False
