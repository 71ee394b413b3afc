"""Private: the loop of one run — stream a model turn, dispatch its calls, suspend, finish.

The run's state is its event log. ``Transcript`` folds events into what the model and the guards
need; the same fold serves a live run (event by event) and a resumed one (the whole log), so a
run continues identically in a new process. ``Driver`` owns the lease of one run while it drives
it, assigns seqs, commits every event before it is delivered, and stops when the run completes,
fails or waits for a person.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID, uuid4

from ._binding import TAMPERED, mismatch
from ._logs import logger
from .capabilities import Capability, Executor, Kind, Principal, args_digest
from .events import (
    ActionResolved,
    Event,
    GuardFired,
    GuardNote,
    PendingAction,
    RunCompleted,
    RunFailed,
    RunStarted,
    TextDelta,
    ThinkingDelta,
    ThinkingDone,
    ToolCallEnd,
    ToolCallRejected,
    ToolCallStart,
    ToolProgress,
    TurnComplete,
    TurnRetracted,
    Usage,
    UserMessage,
)
from .exceptions import StaleEpochError, StoreError
from .guards import CallRecord, RunHistory
from .models.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    StreamRetry,
    StreamStop,
    StreamTextDelta,
    StreamThinkingDelta,
    StreamThinkingDone,
    StreamToolCall,
    StreamUsage,
    TextPart,
    ThinkingPart,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)
from .models.pricing import budget_refusal, cost_usd, estimate_call_usd, price_of
from .models.tiers import plan_turn
from .registry import Admitted, CallScope, Outcome, ParsedCall, Refused, error_content
from .stores.base import ApprovalRecord, AuditRecord, RunRecord, RunStatus

if TYPE_CHECKING:
    from .agent import Agent, _Held

log = logger("fiduciary.loop")

DONE: Any = object()  # end-of-stream marker on a driver's output queue


# --- the fold ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Transcript:
    """A run's log folded into messages, open calls, approvals and the guards' history."""

    started: RunStarted | None = None
    messages: list[Message] = field(default_factory=list)
    parts: list[TextPart | ThinkingPart | ToolUsePart] = field(default_factory=list)
    partial_from: int | None = None
    open_uses: list[ToolUsePart] = field(default_factory=list)
    results: dict[str, ToolResult] = field(default_factory=dict)
    approvals: dict[str, UUID] = field(default_factory=dict)
    # what each approval showed the person: the row is checked against it before execution
    pending_actions: dict[str, PendingAction] = field(default_factory=dict)
    notes: dict[str, list[GuardNote]] = field(default_factory=dict)
    resolved: set[UUID] = field(default_factory=set)
    history: RunHistory = field(default_factory=RunHistory)
    turns_since_user: int = 0
    calls_since_user: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = Decimal(0)  # what the run's model calls cost so far (known prices)
    tool_calls: int = 0
    last_seq: int = 0
    last_text: str = ""
    _records: dict[str, int] = field(default_factory=dict)

    def apply(self, event: Event) -> None:
        self.last_seq = event.seq
        match event:
            case TextDelta(text=text):
                self._start_partial(event.seq)
                if self.parts and isinstance(self.parts[-1], TextPart):
                    self.parts[-1] = TextPart(self.parts[-1].text + text)
                else:
                    self.parts.append(TextPart(text))
            case ThinkingDelta(text=text):
                self._start_partial(event.seq)
                last = self.parts[-1] if self.parts else None
                if isinstance(last, ThinkingPart) and last.signature is None:
                    self.parts[-1] = ThinkingPart(last.text + text)
                else:
                    self.parts.append(ThinkingPart(text))
            case ThinkingDone(signature=signature):
                last = self.parts[-1] if self.parts else None
                if isinstance(last, ThinkingPart):
                    self.parts[-1] = ThinkingPart(last.text, signature or "")
            case ToolCallStart():
                self._start_partial(event.seq)
                self.parts.append(ToolUsePart(event.tool_use_id, event.name, event.input))
                self.calls_since_user += 1
                self.tool_calls += 1
                self._records[event.tool_use_id] = len(self.history.calls)
                self.history.calls.append(
                    CallRecord(
                        tool_use_id=event.tool_use_id,
                        name=event.name,
                        kind=event.kind,
                        input=event.input,
                        args_digest=event.args_digest,
                        at=event.at,
                    )
                )
            case ToolCallEnd():
                self._result(
                    event.tool_use_id, ToolResult(event.tool_use_id, event.output, event.is_error)
                )
                self._outcome(event.tool_use_id, not event.is_error, event.output)
            case ToolCallRejected():
                content = error_content(event.reason, event.message)
                self._result(event.tool_use_id, ToolResult(event.tool_use_id, content, True))
                self._outcome(event.tool_use_id, False, content)
            case PendingAction():
                self.approvals[event.tool_use_id] = event.approval_id
                self.pending_actions[event.tool_use_id] = event
                if event.guard_notes:
                    self.notes[event.tool_use_id] = list(event.guard_notes)
            case ActionResolved():
                self.resolved.add(event.approval_id)
            case TurnComplete():
                message = AssistantMessage(tuple(self.parts))
                self.messages.append(message)
                self.last_text = message.text
                self.open_uses = message.tool_uses
                self.parts = []
                self.partial_from = None
                self.turns_since_user += 1
                self._close_turn()
            case TurnRetracted():
                for part in self.parts:
                    if isinstance(part, ToolUsePart):
                        self.results.pop(part.id, None)
                self.parts = []
                self.partial_from = None
            case UserMessage(text=text):
                self.messages.append(UserTextMessage(text))
                self.history.add_user_message(text)
                self.turns_since_user = 0
                self.calls_since_user = 0
            case Usage():
                self.input_tokens = event.total_input_tokens
                self.output_tokens = event.total_output_tokens
                if event.total_cost_usd is not None:
                    self.cost_usd = event.total_cost_usd
            case RunStarted():
                self.started = event
            case _:
                pass

    def new_call_id(self, proposed: str | None) -> str:
        """The id a call the model just made is recorded under: the provider's when no call of
        this run has it yet, else a fresh one. Ids are the call's identity in the run — its
        result, its approval and its idempotency key are all found by it — and providers do
        not promise unique ones (counters restart every turn, some servers send none)."""
        if proposed and proposed not in self._records:
            return proposed
        while True:
            fresh = f"call_{uuid4().hex}"
            if fresh not in self._records:
                return fresh

    def _start_partial(self, seq: int) -> None:
        if self.partial_from is None:
            self.partial_from = seq

    def _result(self, tool_use_id: str, result: ToolResult) -> None:
        self.results[tool_use_id] = result
        if self.open_uses:
            self._close_turn()

    def _outcome(self, tool_use_id: str, ok: bool, output: str) -> None:
        index = self._records.get(tool_use_id)
        if index is not None:
            record = self.history.calls[index]
            self.history.calls[index] = CallRecord(
                tool_use_id=record.tool_use_id,
                name=record.name,
                kind=record.kind,
                input=record.input,
                args_digest=record.args_digest,
                at=record.at,
                ok=ok,
                output=output,
            )

    def _close_turn(self) -> None:
        if self.open_uses and all(u.id in self.results for u in self.open_uses):
            self.messages.append(
                ToolResultsMessage(tuple(self.results[u.id] for u in self.open_uses))
            )
            self.open_uses = []

    @property
    def unresolved(self) -> list[ToolUsePart]:
        return [u for u in self.open_uses if u.id not in self.results]


# --- the driver -------------------------------------------------------------------------------


class Driver:
    """Drives one leased run; events go to ``out`` only after they are committed."""

    def __init__(
        self,
        agent: Agent,
        run: RunRecord,
        transcript: Transcript,
        out: asyncio.Queue[Any] | None,
    ) -> None:
        self.agent = agent
        self.run = run
        self.run_id = run.run_id
        self.epoch = run.epoch
        self.t = transcript
        self.out = out
        self.principal = Principal(run.principal, frozenset(run.scopes))
        started = transcript.started
        allowed_names = agent.registry.names if started is None else started.capabilities
        self.allowed = frozenset(n for n in allowed_names if agent.registry.get(n) is not None)
        kinds = [k.value for k in Kind] if started is None else started.allowed_kinds
        self.allowed_kinds = frozenset(Kind(k) for k in kinds)
        self.scope = CallScope(
            run_id=run.run_id,
            principal=self.principal,
            allowed=self.allowed,
            allowed_kinds=self.allowed_kinds,
            history=transcript.history,
            report_guard=self._report_guard,
            report_progress=self._report_progress,
        )
        self._next_seq = transcript.last_seq + 1
        self._events: list[Event] = []
        self._status: RunStatus | None = None
        self._approvals: list[ApprovalRecord] = []
        self._audit: list[AuditRecord] = []
        self._flusher: asyncio.Task[None] | None = None
        self._error: Exception | None = None
        self._renewal: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._held: _Held | None = None  # the principal lock, while a section of writes runs

    # --- emission ------------------------------------------------------------------------
    async def emit(
        self,
        *events: tuple[type[Any], dict[str, Any]],
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
    ) -> list[Event]:
        """Record events: the loop sees them at once, listeners only after their commit.

        Emits do not wait for the disk: they join the run's next commit (one transaction for
        everything emitted meanwhile). ``barrier`` waits until all of it is committed; the loop
        calls it before any side effect and before it stops.
        """
        if self._error is not None:
            raise self._error
        now = self.agent.clock.now()
        built: list[Event] = []
        for cls, fields in events:
            event = cls(run_id=self.run_id, seq=self._next_seq, at=now, **fields)
            self._next_seq += 1
            self.t.apply(event)
            built.append(event)
        self._events.extend(built)
        if status is not None:
            self._status = status
        self._approvals.extend(approvals)
        self._audit.extend(audit)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return built

    async def barrier(self) -> None:
        """Wait until everything emitted so far is committed (raises if a commit failed)."""
        while self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._error is not None:
            raise self._error

    async def _flush(self) -> None:
        store = self.agent.store
        try:
            while self._events or self._status is not None or self._approvals or self._audit:
                events, self._events = self._events, []
                status, self._status = self._status, None
                approvals, self._approvals = self._approvals, []
                audit, self._audit = self._audit, []
                await store.commit(
                    self.run_id,
                    epoch=self.epoch,
                    events=events,
                    status=status,
                    approvals=approvals,
                    audit=audit,
                )
                if self.out is not None:
                    for event in events:
                        self.out.put_nowait(event)
        except BaseException as exc:  # the drive stops; the run resumes from the store
            self._error = exc if isinstance(exc, Exception) else StoreError(repr(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._flusher = None

    async def _report_guard(
        self, tool_use_id: str, guard: str, tier: str, phase: str, verdict: str, message: str
    ) -> None:
        await self.emit(
            (
                GuardFired,
                {
                    "tool_use_id": tool_use_id,
                    "guard": guard,
                    "tier": tier,
                    "phase": phase,
                    "verdict": verdict,
                    "message": self.agent.redactor.redact_text(message),
                },
            )
        )

    async def _report_progress(
        self, tool_use_id: str, name: str, message: str, pct: float | None
    ) -> None:
        await self.emit(
            (
                ToolProgress,
                {
                    "tool_use_id": tool_use_id,
                    "name": name,
                    "message": self.agent.redactor.redact_text(message),
                    "pct": pct,
                },
            )
        )

    # --- the run -------------------------------------------------------------------------
    async def drive(self) -> None:
        """Continue the run from wherever its log stands; always releases the lease.

        A failing store (a commit or a read refused for any reason but a takeover) is raised
        once the lease is released: nothing more is written, everything committed stays, and
        the run — left ``running`` or woken — is found again by ``runs_to_resume``.
        """
        loop = asyncio.get_running_loop()
        self._renewal = loop.call_later(self.agent.lease_seconds / 3, self._renew_soon)
        failure: StoreError | None = None
        try:
            await self._drive()
            await self.barrier()
        except StaleEpochError:  # a commit or a ledger_begin refused: nothing was written
            log.warning("run %s was taken over by another worker; stopping", self.run_id)
        except StoreError as exc:
            failure = exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("run %s failed", self.run_id)
            try:
                await self.emit(
                    (
                        RunFailed,
                        {"reason": "error", "message": f"internal error ({type(exc).__name__})"},
                    ),
                    status="failed",
                )
                await self.barrier()
            except StaleEpochError:
                pass
            except StoreError as store_exc:
                failure = store_exc
            except Exception:
                log.exception("run %s: its failure could not be recorded", self.run_id)
        finally:
            with contextlib.suppress(BaseException):
                await self.barrier()
            self._stop_renewing()
            with contextlib.suppress(Exception):
                await self.agent.store.release(self.run_id, epoch=self.epoch)
            if self.out is not None:
                self.out.put_nowait(DONE)
        if failure is not None:
            log.warning(
                "run %s stopped: the store failed (%s); it can be resumed", self.run_id, failure
            )
            raise failure

    # The lease is renewed every third of its length while the run is driven. A timer, not a
    # task, waits for it: most drives end long before the first renewal.
    def _renew_soon(self) -> None:
        self._renewal = None
        self._renewing = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        ttl = self.agent.lease_seconds
        ok = await self.agent.store.renew(
            self.run_id, epoch=self.epoch, now=self.agent.clock.now(), ttl_seconds=ttl
        )
        self._renewing = None
        if ok:
            loop = asyncio.get_running_loop()
            self._renewal = loop.call_later(ttl / 3, self._renew_soon)

    def _stop_renewing(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        if self._renewing is not None:
            self._renewing.cancel()
            self._renewing = None

    async def _drive(self) -> None:
        if self.run.status != "running":
            # while driven the run is "running": a crash now leaves it for resume_all to find.
            # This commit also clears the run's wake marker; it is committed before the
            # decisions are read, so a decision made after it marks the run again.
            await self.emit(status="running")
            await self.barrier()
        if self.t.partial_from is not None:
            await self.emit((TurnRetracted, {"from_seq": self.t.partial_from}))
        if self.t.unresolved:
            pending = await self._settle()
            if pending:
                await self._suspend(pending)
                return
        while True:
            if self.t.turns_since_user >= self.agent.max_turns:
                await self.emit(
                    (
                        RunFailed,
                        {
                            "reason": "max_turns",
                            "message": f"stopped after {self.agent.max_turns} model turns",
                        },
                    ),
                    status="failed",
                )
                return
            turn = await self._model_turn()
            if turn is None:
                return
            called, writes = turn
            if not called:
                await self.emit(
                    (
                        RunCompleted,
                        {
                            "text": self.t.last_text,
                            "input_tokens": self.t.input_tokens,
                            "output_tokens": self.t.output_tokens,
                            "tool_calls": self.t.tool_calls,
                            "cost_usd": self.t.cost_usd,
                        },
                    ),
                    status="completed",
                )
                return
            pending = await self._dispatch_writes(writes)
            if pending:
                await self._suspend(pending)
                return

    async def _suspend(self, pending: list[ApprovalRecord]) -> None:
        server = any(p.executor == "server" for p in pending)
        status: RunStatus = "awaiting_approval" if server else "awaiting_client_result"
        await self.emit(status=status)

    async def cancel(self, *, by: str, reason: str) -> None:
        """End the run for good (``Agent.cancel``, which holds the principal's lock around
        this): close every open call, then fail it ``aborted`` with status ``cancelled``.
        Nothing is executed here."""
        store, registry, clock = self.agent.store, self.agent.registry, self.agent.clock
        if self.t.partial_from is not None:
            await self.emit((TurnRetracted, {"from_seq": self.t.partial_from}))
        told = f"The run was cancelled by {by}" + (f" ({reason})" if reason else "")
        for use in list(self.t.unresolved):
            args: Any = use.input
            approval_id = self.t.approvals.get(use.id)
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
                await self._resolved(use, record)
            call = registry.parse(use.id, use.name, args)
            cap = call.cap
            if cap is not None and call.args is not None:
                if record is not None and record.status == "client_result":
                    # the client did it: its report is the outcome
                    await self._end(call, self._client_outcome(cap, call, record))
                    continue
                if cap.replay.value == "never":
                    ctx = registry.context(self.scope, cap, call.args, call.tool_use_id)
                    entry = await store.ledger_get(ctx.idempotency_key)
                    if entry is not None:  # it may have acted: say what is known
                        await self._end(
                            call, registry.recorded(self.scope, cap, call, call.args, entry)
                        )
                        continue
            await self._reject(call, Refused("cancelled", f"{told}; this call was not executed."))
        await self.emit(
            (
                RunFailed,
                {
                    "reason": "aborted",
                    "message": f"cancelled by {by}" + (f": {reason}" if reason else ""),
                },
            ),
            status="cancelled",
        )
        await self.barrier()

    # --- one model turn ------------------------------------------------------------------
    async def _model_turn(self) -> tuple[bool, list[ParsedCall]] | None:
        """Stream one turn; reads start as soon as their arguments are complete.

        Returns whether the model called anything and the calls still to dispatch (writes and
        refusals), or None when the run failed.
        """
        agent = self.agent
        names = sorted(self.allowed)
        plan = plan_turn(
            [c for n in names if (c := agent.registry.get(n)) is not None],
            self.t.messages,
            allowed_kinds=self.allowed_kinds,
            settings=agent.model_settings,
            tier=agent.model_tier,
            effort=agent.thinking_effort,
        )
        request = ModelRequest(
            system=agent.system,
            messages=tuple(self.t.messages),
            tools=agent.registry.tool_specs(names),
            settings=plan.settings,
        )
        # the model that will answer (a tiered model routes by the plan's tier), and its price
        route = getattr(agent.model, "model_for", None)
        answering = route(request) if callable(route) else agent.model
        if agent.budget_usd is not None:
            refusal = budget_refusal(
                budget_usd=agent.budget_usd,
                spent_usd=self.t.cost_usd,
                next_call_usd=estimate_call_usd(price_of(answering, table=agent.prices), request),
                model=answering.name,
            )
            if refusal is not None:
                await self.emit(
                    (RunFailed, {"reason": "budget", "message": refusal}), status="failed"
                )
                return None
        reads: list[asyncio.Task[None]] = []
        later: list[ParsedCall] = []
        any_calls = False
        usage = StreamUsage()
        answered_by: str | None = None
        stop = "end_turn"
        try:
            async for item in agent.model.stream(request):
                match item:
                    case StreamTextDelta(text=text):
                        if text:
                            await self.emit((TextDelta, {"text": agent.redactor.redact_text(text)}))
                    case StreamThinkingDelta(text=text, block_index=index):
                        safe = agent.redactor.redact_text(text)
                        await self.emit((ThinkingDelta, {"text": safe, "block_index": index}))
                    case StreamThinkingDone(block_index=index, signature=signature):
                        await self.emit(
                            (ThinkingDone, {"block_index": index, "signature": signature})
                        )
                    case StreamToolCall(id=call_id, name=name, arguments=arguments):
                        any_calls = True
                        call = agent.registry.parse(self.t.new_call_id(call_id), name, arguments)
                        over = self.t.calls_since_user >= agent.max_tool_calls
                        await self._start(call)
                        if over:
                            await self._reject(
                                call,
                                Refused(
                                    "tool_call_limit",
                                    f"The limit of {agent.max_tool_calls} tool calls per "
                                    "request was reached; answer with what you have.",
                                ),
                            )
                        elif call.cap is not None and not call.cap.is_write:
                            reads.append(asyncio.create_task(self._run_read(call)))
                        else:
                            later.append(call)
                    case StreamUsage():
                        answered_by = item.model or answered_by
                        usage = StreamUsage(
                            usage.input_tokens + item.input_tokens,
                            usage.output_tokens + item.output_tokens,
                            usage.cache_read_tokens + item.cache_read_tokens,
                            usage.cache_write_tokens + item.cache_write_tokens,
                        )
                    case StreamStop(reason=reason):
                        stop = reason
                    case StreamRetry():
                        # the model is asked again: what this turn streamed so far is void
                        if self.t.partial_from is not None:
                            await self.emit((TurnRetracted, {"from_seq": self.t.partial_from}))
        except (asyncio.CancelledError, StoreError):  # a failing store is not the model's
            for task in reads:
                task.cancel()
            raise
        except Exception as exc:
            for task in reads:
                task.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            log.warning("model %s failed: %s", agent.model.name, exc)
            partial = self.t.partial_from
            events: list[tuple[type[Any], dict[str, Any]]] = []
            if partial is not None:
                events.append((TurnRetracted, {"from_seq": partial}))
            message = agent.redactor.redact_text(str(exc))[:500] or type(exc).__name__
            events.append((RunFailed, {"reason": "error", "message": f"model error: {message}"}))
            await self.emit(*events, status="failed")
            return None
        cost = cost_usd(price_of(answering, answered_by, agent.prices), usage)
        await self.emit(
            (
                Usage,
                {
                    "model": answered_by or agent.model.name,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cache_read_tokens": usage.cache_read_tokens,
                    "cache_write_tokens": usage.cache_write_tokens,
                    "total_input_tokens": self.t.input_tokens + usage.input_tokens,
                    "total_output_tokens": self.t.output_tokens + usage.output_tokens,
                    "tier": plan.tier,
                    "effort": plan.effort,
                    "cost_usd": cost,
                    "total_cost_usd": self.t.cost_usd + (cost or Decimal(0)),
                },
            ),
            (TurnComplete, {"stop_reason": stop}),
        )
        if reads:
            await asyncio.gather(*reads)
        return any_calls, later

    async def _start(self, call: ParsedCall) -> None:
        await self.emit(
            (
                ToolCallStart,
                {
                    "tool_use_id": call.tool_use_id,
                    "name": call.name,
                    "input": self.agent.redactor.redact(call.args_json),
                    "args_digest": call.digest,
                    "kind": call.cap.kind.value if call.cap else None,
                },
            )
        )

    async def _run_read(self, call: ParsedCall) -> None:
        verdict = await self.agent.registry.admit(self.scope, call)
        if isinstance(verdict, Refused):
            await self._reject(call, verdict)
            return
        outcome = await self.agent.registry.execute(
            self.scope,
            verdict.cap,
            call,
            verdict.args,
            epoch=self.epoch,
            tier="auto",
            amount_usd=None,
            notes=verdict.notes,
        )
        await self._end(call, outcome)

    async def _reject(self, call: ParsedCall, refused: Refused) -> None:
        refused = Refused(refused.reason, self.agent.redactor.redact_text(refused.message))
        audit: list[AuditRecord] = []
        if call.cap is not None:
            audit.append(
                self.agent.registry.audit(
                    self.scope,
                    call.cap,
                    call,
                    f"rejected:{refused.reason}",
                    None,
                    None,
                    call.args,
                    refused.message,
                    None,
                )
            )
        await self.emit(
            (
                ToolCallRejected,
                {
                    "tool_use_id": call.tool_use_id,
                    "name": call.name,
                    "reason": refused.reason,
                    "message": refused.message,
                },
            ),
            audit=audit,
        )

    async def _end(self, call: ParsedCall, outcome: Outcome) -> None:
        await self.emit(
            (
                ToolCallEnd,
                {
                    "tool_use_id": call.tool_use_id,
                    "name": call.name,
                    "output": outcome.content,
                    "is_error": outcome.is_error,
                    "error_code": outcome.error_code,
                    "recovery": outcome.recovery,
                    "truncated": outcome.truncated,
                    "hints": outcome.hints,
                },
            ),
            audit=[outcome.audit] if outcome.audit else [],
        )

    # --- writes --------------------------------------------------------------------------
    async def _dispatch_writes(self, calls: list[ParsedCall]) -> list[ApprovalRecord]:
        pending: list[ApprovalRecord] = []
        if not calls:
            return pending
        async with self.agent.principal_lock(self.principal.actor_id) as held:
            self._held = held
            try:
                for call in calls:
                    record = await self._dispatch(call)
                    if record is not None:
                        pending.append(record)
                # what the writes spent is committed before the next holder reads the daily spend
                await self.barrier()
            finally:
                self._held = None
        return pending

    async def _dispatch(
        self, call: ParsedCall, recovery: Literal["replayed"] | None = None
    ) -> ApprovalRecord | None:
        # earlier writes' audit rows count toward the daily limit: commit them first
        await self.barrier()
        verdict = await self.agent.registry.admit(self.scope, call)
        if isinstance(verdict, Refused):
            await self._reject(call, verdict)
            return None
        cap = verdict.cap
        if verdict.decision.tier == "auto" and cap.executor is Executor.SERVER:
            await self._before_effect()
            outcome = await self.agent.registry.execute(
                self.scope,
                cap,
                call,
                verdict.args,
                epoch=self.epoch,
                tier="auto",
                amount_usd=verdict.decision.amount_usd,
                recovery=recovery,
                notes=verdict.notes,
            )
            await self._end(call, outcome)
            return None
        return await self._pend(verdict)

    async def _pend(self, admitted: Admitted) -> ApprovalRecord:
        cap, call, decision = admitted.cap, admitted.call, admitted.decision
        now = self.agent.clock.now()
        tier: Literal["confirm", "explicit"] = (
            "explicit" if decision.tier == "explicit" else "confirm"
        )
        args = admitted.args.model_dump(mode="json")
        record = ApprovalRecord(
            approval_id=uuid4(),
            run_id=self.run_id,
            tool_use_id=call.tool_use_id,
            principal=self.principal.actor_id,
            capability=cap.name,
            args=args,
            args_digest=args_digest(args),
            tier=tier,
            amount_usd=decision.amount_usd,
            modifiable_fields=cap.modifiable_fields,
            executor=cap.executor.value,
            status="pending",
            created_at=now,
            expires_at=now + timedelta(seconds=self.agent.policy.approval_ttl_seconds),
        )
        redactor = self.agent.redactor
        audit = self.agent.registry.audit(
            self.scope, cap, call, "pending", tier, decision.amount_usd, admitted.args, None, None
        )
        await self.emit(
            (
                PendingAction,
                {
                    "approval_id": record.approval_id,
                    "tool_use_id": call.tool_use_id,
                    "name": cap.name,
                    "input": redactor.redact(args),
                    "description": redactor.redact_text(
                        cap.description_of(admitted.args, decision.amount_usd)
                    ),
                    "amount_usd": decision.amount_usd,
                    "tier": tier,
                    "acknowledge": "amount" if tier == "explicit" else None,
                    "modifiable_fields": list(cap.modifiable_fields),
                    "guard_notes": [
                        GuardNote(
                            guard=n.guard,
                            verdict=n.verdict,
                            message=redactor.redact_text(n.message),
                        )
                        for n in admitted.notes
                    ],
                    "expires_at": record.expires_at,
                    "args_digest": record.args_digest,
                    "executor": cap.executor.value,
                },
            ),
            approvals=[record],
            audit=[audit],
        )
        return record

    async def _before_effect(self) -> None:
        """The log up to here is durable, and the principal's lock still held, before any
        effect starts."""
        await self.barrier()
        if self._held is not None:
            await self._held.verify()

    # --- settling calls left open (approvals, crashes) -----------------------------------
    async def _settle(self) -> list[ApprovalRecord]:
        pending: list[ApprovalRecord] = []
        registry = self.agent.registry
        async with self.agent.principal_lock(self.principal.actor_id) as held:
            self._held = held
            try:
                for use in self.t.unresolved:
                    approval_id = self.t.approvals.get(use.id)
                    if approval_id is not None:
                        record = await self._settle_approval(use, approval_id)
                        if record is not None:
                            pending.append(record)
                        continue
                    call = registry.parse(use.id, use.name, use.input)
                    cap = call.cap
                    if cap is not None and cap.replay.value == "never" and call.args is not None:
                        ctx = registry.context(self.scope, cap, call.args, call.tool_use_id)
                        entry = await self.agent.store.ledger_get(ctx.idempotency_key)
                        if entry is not None:
                            await self._end(
                                call, registry.recorded(self.scope, cap, call, call.args, entry)
                            )
                            continue
                        record = await self._dispatch(call)
                    else:
                        record = await self._dispatch(call, recovery="replayed")
                    if record is not None:
                        pending.append(record)
                await self.barrier()  # committed before the next holder reads the daily spend
            finally:
                self._held = None
        return pending

    async def _resolved(self, use: ToolUsePart, record: ApprovalRecord) -> None:
        """``action_resolved`` for a decided approval, unless the log has it already."""
        if record.approval_id in self.t.resolved:
            return
        await self.emit(
            (
                ActionResolved,
                {
                    "approval_id": record.approval_id,
                    "tool_use_id": use.id,
                    "decision": record.status,
                    "by": record.decided_by,
                    "reason": record.reason,
                    "edits": self.agent.redactor.redact(_edits(record)),
                    "args_digest": record.approved_digest,
                },
            )
        )

    async def _settle_approval(self, use: ToolUsePart, approval_id: UUID) -> ApprovalRecord | None:
        store, registry, clock = self.agent.store, self.agent.registry, self.agent.clock
        record = await store.get_approval(approval_id)
        if record is None:  # the log says pending but the row is gone: treat as expired
            await self._reject(
                ParsedCall(use.id, use.name, use.input, registry.get(use.name)),
                Refused("expired", "The approval request no longer exists."),
            )
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
        call = registry.parse(use.id, use.name, record.approved_args or record.args)
        await self._resolved(use, record)
        if record.status == "denied":
            reason = f": {record.reason}" if record.reason else ""
            await self._reject(
                call,
                Refused(
                    "denied",
                    f"The person declined this action{reason}. It was not executed; do not retry "
                    "it unless they ask again.",
                ),
            )
            return None
        if record.status == "expired":
            await self._reject(
                call,
                Refused(
                    "expired",
                    "Nobody approved this action in time; it was not executed. Ask the person "
                    "whether they still want it.",
                ),
            )
            return None
        shown = self.t.pending_actions.get(use.id)
        why = mismatch(record, shown if shown and shown.approval_id == approval_id else None, None)
        if why is None and record.principal != self.principal.actor_id:
            why = "it names another principal"
        if why is not None:  # the row was altered: run nothing, say so, keep it in the log
            log.error("approval %s not executed: its row was altered (%s)", approval_id, why)
            await self._reject(
                registry.parse(use.id, use.name, use.input),
                Refused("tampered", TAMPERED.format(why=why)),
            )
            return None
        cap = call.cap
        if cap is None or call.args is None:
            await self._reject(
                call,
                Refused("not_allowed", f"{use.name} is no longer available; it was not executed."),
            )
            return None
        if record.status == "client_result":
            await self._end(call, self._client_outcome(cap, call, record))
            return None
        # approved: execute exactly the approved arguments
        if args_digest(call.args_json) != record.approved_digest:
            await self._reject(
                call,
                Refused(
                    "denied", "The approved arguments do not match what was approved; not executed."
                ),
            )
            return None
        edits = _edits(record)
        # the notes the person saw on the card go to the model with the result
        notes = list(self.t.notes.get(use.id, ()))
        if edits:
            shown = self.agent.redactor.redact(edits)
            message = f"The person edited the call before approving it: {shown}."
            notes.append(GuardNote(guard="approval", verdict="hint", message=message))
        await self._before_effect()
        outcome = await registry.execute(
            self.scope,
            cap,
            call,
            call.args,
            epoch=self.epoch,
            tier=record.tier,
            amount_usd=record.amount_usd,
            notes=notes,
        )
        await self._end(call, outcome)
        return None

    def _client_outcome(self, cap: Capability, call: ParsedCall, record: ApprovalRecord) -> Outcome:
        registry = self.agent.registry
        try:
            output = registry.redactor.redact(cap.dump_output(record.client_result))
        except Exception:
            content = error_content("invalid_output", "The client's result was not understood.")
            return Outcome(
                content=content,
                is_error=True,
                error_code="invalid_output",
                audit=registry.audit(
                    self.scope,
                    cap,
                    call,
                    "error",
                    record.tier,
                    record.amount_usd,
                    call.args,
                    content,
                    None,
                ),
            )
        content, truncated = registry.render(cap, output, [])
        return Outcome(
            content=content,
            truncated=truncated,
            audit=registry.audit(
                self.scope,
                cap,
                call,
                "ok",
                record.tier,
                record.amount_usd,
                call.args,
                content,
                None,
            ),
        )


def _edits(record: ApprovalRecord) -> dict[str, Any] | None:
    if record.approved_args is None:
        return None
    changed = {k: v for k, v in record.approved_args.items() if record.args.get(k) != v}
    return changed or None
