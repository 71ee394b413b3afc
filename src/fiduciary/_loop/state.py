"""The state of one drive of a run, shared by the turn, dispatch and settle steps.

A ``Drive`` holds the runtime, the leased run, its transcript, its writer, the ``CallScope``
the gates see, and the principal's lock while a section of writes runs. The steps are
functions over it, in their own modules (``turn``, ``dispatch``, ``settle``); ``Driver``
(``driver``) strings them together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
from uuid import UUID

from ..capabilities import Kind, Principal
from ..context.tokens import LastRequest
from ..events import Draft, Event, GuardFiredDraft, ToolProgressDraft
from ..gates import Attempt, CallScope, Outcome, ParsedCall, Pending, Verdict
from ..models.base import ToolSpec
from ..models.pricing import Price, price_of
from ..models.tiers import TurnPlan
from ..outputs import OutputSpec, Valid
from ..stores.base import ApprovalRecord, AuditRecord, LedgerEntry, RunRecord, RunStatus
from .runtime import Held, Runtime
from .transcript import Transcript
from .writer import Writer

__all__ = ["Drive"]

_ALL_KINDS = frozenset(Kind)
_KINDS = {k.value: k for k in Kind}  # (``Kind(value)`` goes through the enum's slow call)


class Drive:
    """One leased run being driven; events reach ``writer.out`` only once committed."""

    def __init__(
        self,
        rt: Runtime,
        run: RunRecord,
        transcript: Transcript,
        *,
        unrecorded: Sequence[Event] = (),
        output: OutputSpec[Any] | None = None,
        deps: Any = None,
    ) -> None:
        """``unrecorded``: a new run's first events, folded into ``transcript`` but not in the
        store yet: the drive's first commit creates the run with them. ``output``: the type
        the run's answer must be (fiduciary.outputs); ``deps``: what its handlers get as
        ``ctx.deps`` (fiduciary.deps)."""
        self.rt = rt
        self.run = run
        self.run_id = run.run_id
        self.epoch = run.epoch
        self.t = transcript
        # a new run's log holds its run_started and user_message: more means a later drive
        self.trace = rt.tracer.drive(
            run, resumed=transcript.last_seq > 2, model=rt.model.name, redactor=rt.redactor
        )
        limits = rt.limits
        self.writer = Writer(
            rt.store,
            rt.clock,
            run,
            transcript,
            limits.lease_seconds,
            delay=limits.commit_delay,
            unrecorded=unrecorded,
            trace=self.trace,
        )
        self.principal = Principal(run.principal, frozenset(run.scopes))
        gates, started = rt.gates, transcript.started
        allowed_names = gates.names if started is None else started.capabilities
        self.allowed = frozenset(n for n in allowed_names if gates.get(n) is not None)
        self.allowed_kinds = (
            _ALL_KINDS
            if started is None
            else frozenset(_KINDS.get(k) or Kind(k) for k in started.allowed_kinds)
        )
        self.scope = CallScope(
            run_id=run.run_id,
            principal=self.principal,
            allowed=self.allowed,
            allowed_kinds=self.allowed_kinds,
            history=transcript.history,
            epoch=run.epoch,
            report=self._report,
            before_effect=self._before_effect,
            begin=self._begin,
            finish=self.writer.finish,
            origin=lambda: transcript.origin,
            deps=deps,
        )
        self.held: Held | None = None  # the principal lock, while a section of writes runs
        # the runs whose end open calls of this drive wait for (``AwaitingRun``: a delegate
        # call's child); the drive then ends with the run ``awaiting_child``
        self.awaiting: set[UUID] = set()
        self.output = output
        self.answer: Valid[Any] | None = None  # the typed answer the last turn gave, validated
        # the same for every turn of a drive (no user message arrives during one)
        self.tools: tuple[ToolSpec, ...] | None = None
        self.plan: TurnPlan | None = None
        # the provider's count of the last request and its estimate: how the next is measured
        self.last_request: LastRequest | None = None
        # the drive ended with every event it folded committed: its transcript is the log's
        self.settled = False
        self._prices: dict[tuple[int, str | None], Price | None] = {}

    def price(self, model: object, name: str | None = None) -> Price | None:
        """``price_of(model, name)`` in the runtime's table, looked up once a drive (the table
        lookup tries aliases, suffixes and patterns: the same work every turn otherwise)."""
        key = (id(model), name)  # (the model is the runtime's, alive as long as the drive)
        if key not in self._prices:
            self._prices[key] = price_of(model, name, self.rt.prices)
        return self._prices[key]

    # --- emission ------------------------------------------------------------------------
    def emit(
        self,
        *drafts: Draft,
        status: RunStatus | None = None,
        approvals: tuple[ApprovalRecord, ...] = (),
        audit: tuple[AuditRecord, ...] = (),
    ) -> list[Event]:
        events = self.writer.emit(*drafts, status=status, approvals=approvals, audit=audit)
        self.trace.observe(events, audit)
        return events

    async def barrier(self) -> None:
        await self.writer.barrier()

    def record(self, verdict: Verdict) -> ApprovalRecord | None:
        """Emit a call's verdict with its audit row (and its approval, when it waits for one)."""
        if isinstance(verdict, Outcome) and verdict.awaiting is not None:
            self.awaiting.add(verdict.awaiting)  # no result yet: nothing to record
            return None
        audit = () if verdict.audit is None else (verdict.audit,)
        if isinstance(verdict, Pending):
            self.emit(verdict.draft, approvals=(verdict.record,), audit=audit)
            return verdict.record
        self.emit(verdict.draft, audit=audit)
        return None

    def end(self, outcome: Outcome | None) -> bool:
        """Record the outcome of a call, if there is one; whether there was."""
        if outcome is None:
            return False
        self.record(outcome)
        return True

    def attempt(
        self,
        call: ParsedCall,
        *,
        recovery: Literal["replayed"] | None = None,
        concurrent: bool = False,
    ) -> Attempt:
        return Attempt(self.scope, call, recovery=recovery, concurrent=concurrent)

    async def _report(self, draft: GuardFiredDraft | ToolProgressDraft) -> None:
        self.emit(draft)

    async def _begin(self, entry: LedgerEntry) -> LedgerEntry | None:
        """Before the effect of a call through the ledger: the principal's lock still held,
        then the log up to here and the ledger row in one durable commit."""
        if self.held is not None:
            await self.held.verify()
        return await self.writer.begin(entry)

    async def _before_effect(self) -> None:
        """The log up to here is durable, and the principal's lock still held, before any
        effect starts."""
        await self.barrier()
        if self.held is not None:
            await self.held.verify()
