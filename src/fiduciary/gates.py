"""The gate pipeline of one tool call.

A call goes through the gates as one ``Attempt``: the run's ``CallScope``, the parsed call,
and what the gates find on the way (its tier, its amount, the guards' notes). ``Gates.run``
takes it through steps 1-6 (``admit``: whitelist, kind ceiling, input validation, pre-guards,
server-side authorization, policy) and then either parks it for a person (``Pending``), or runs
steps 7-11 (``execute``: ledger, execution with timeout, output validation, redaction +
result budget; the post-guards follow the call's end: ``_loop.after``). Every verdict —
``Refused``, ``Pending``, ``Outcome`` — carries the event that records it and its audit row:
the loop only emits them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal, TypeAlias
from uuid import UUID, uuid4

from pydantic import BaseModel, ValidationError

from ._logs import logger
from ._render import render_result
from .capabilities import (
    CallContext,
    Capability,
    Executor,
    Kind,
    Principal,
    Replay,
    args_digest,
    out_of_range,
)
from .clock import Clock
from .events import (
    GuardFiredDraft,
    GuardNote,
    Origin,
    PendingActionDraft,
    RejectReason,
    ToolCallEndDraft,
    ToolCallRejectedDraft,
    ToolProgressDraft,
)
from .exceptions import CapabilityError, ConfigurationError
from .guards import Guard, GuardCall, GuardOutcome, RunHistory, order_guards, run_guards
from .models.base import ToolSpec
from .policy import Policy, PolicyDecision
from .redaction import Redactor
from .stores.base import ApprovalRecord, AuditRecord, LedgerEntry, LedgerFinish, Store

__all__ = [
    "Attempt",
    "AuthorizationRequest",
    "Authorize",
    "CallScope",
    "Gates",
    "Outcome",
    "ParsedCall",
    "Pending",
    "Refused",
    "Verdict",
]

log = logger("fiduciary.gates")

DEFAULT_RESULT_CHARS = 16_000
DEFAULT_AUTHORIZE_TIMEOUT = 10.0  # seconds; an authorizer that has not answered by then denies
PLAN_FIRST_KINDS = frozenset({Kind.READ, Kind.PREVIEW, Kind.PROPOSE})
ALL_KINDS = frozenset(Kind)


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """What the host's ``authorize`` callback judges (on the server, never from model text)."""

    capability: Capability
    args: dict[str, Any]
    principal: Principal
    run_id: UUID
    tool_use_id: str


Authorize: TypeAlias = Callable[[AuthorizationRequest], "bool | Awaitable[bool]"]


async def _nothing(*_: Any) -> None:
    return None


def _in_person() -> Origin | None:
    return None


@dataclass(frozen=True, slots=True)
class CallScope:
    """What one run gives the pipeline: who, which capabilities, what happened so far, the
    lease epoch its ledger rows are fenced by, and where the guards' and handlers' reports
    (``guard_fired``, ``tool_progress``, redacted already) go.
    ``before_effect`` is awaited before a call that is not ``concurrent`` starts its effect
    (the loop makes its log durable and checks the principal's lock there).

    A run that keeps its own log may also take the ledger's writes into its commits:
    ``begin`` replaces ``before_effect`` then ``Store.ledger_begin`` for such a call (the loop
    commits its log and the ledger row in one durable transaction), and ``finish`` takes a
    row's ``Store.ledger_finish`` into the log's next commit. ``origin``: the outside event
    the run's latest message came from (None: its principal in person), read at each call."""

    run_id: UUID
    principal: Principal
    allowed: frozenset[str]
    allowed_kinds: frozenset[Kind]
    history: RunHistory
    epoch: int = 0
    report: Callable[[GuardFiredDraft | ToolProgressDraft], Awaitable[None]] = _nothing
    before_effect: Callable[[], Awaitable[None]] = _nothing
    begin: Callable[[LedgerEntry], Awaitable[LedgerEntry | None]] | None = None
    finish: Callable[[LedgerFinish], None] | None = None
    origin: Callable[[], Origin | None] = _in_person


@dataclass(slots=True)
class ParsedCall:
    """A tool call as the model produced it, parsed once."""

    tool_use_id: str
    name: str
    raw: dict[str, Any] | None  # None: the arguments were not a JSON object
    cap: Capability | None
    args: BaseModel | None = None
    error: str | None = None
    digest: str = ""
    _json: dict[str, Any] | None = None
    _shown: dict[str, Any] | None = None

    @property
    def args_json(self) -> dict[str, Any]:
        """The validated arguments as JSON (the raw ones when they did not validate); made
        once: the digest, the guards, the event, the approval and the audit row share it."""
        if self._json is None:
            self._json = self.args.model_dump(mode="json") if self.args is not None else None
        return self._json if self._json is not None else (self.raw or {})


@dataclass(slots=True)
class Attempt:
    """One call on its way through the gates, admit → execute.

    ``tier``, ``amount_usd`` and ``notes`` are what admission found (or, for an approved call,
    what the approval recorded); ``recovery`` marks a call re-run after a crash;
    ``concurrent``: a read running beside the others of its turn — it never waits for a
    person, and starts without ``before_effect``."""

    scope: CallScope
    call: ParsedCall
    tier: str | None = None
    amount_usd: Decimal | None = None
    notes: tuple[GuardNote, ...] = ()
    recovery: Literal["replayed"] | None = None
    concurrent: bool = False
    _ctx: CallContext | None = None

    @property
    def cap(self) -> Capability:
        assert self.call.cap is not None  # admitted calls only
        return self.call.cap

    @property
    def args(self) -> BaseModel:
        assert self.call.args is not None  # admitted calls only
        return self.call.args


@dataclass(frozen=True, slots=True)
class Refused:
    """The call does not run: its ``tool_call_rejected`` and (a known capability's) audit row."""

    call: ParsedCall
    reason: RejectReason
    message: str
    audit: AuditRecord | None = None

    @property
    def draft(self) -> ToolCallRejectedDraft:
        return ToolCallRejectedDraft(
            tool_use_id=self.call.tool_use_id,
            name=self.call.name,
            reason=self.reason,
            message=self.message,
        )


@dataclass(frozen=True, slots=True)
class Pending:
    """The call waits for a person (or for the client that executes it): the approval row, the
    ``pending_action`` the person is shown, and the audit row."""

    record: ApprovalRecord
    draft: PendingActionDraft
    audit: AuditRecord


@dataclass(slots=True)
class Outcome:
    """The result of one executed call: its ``tool_call_end`` and its audit row."""

    call: ParsedCall
    content: str
    is_error: bool = False
    error_code: str | None = None
    recovery: Literal["replayed", "ledger", "unknown"] | None = None
    truncated: bool = False
    hints: list[str] = field(default_factory=list)
    audit: AuditRecord | None = None
    # (the validated output,) of a call whose handler ran and succeeded here: what the
    # post-execution guards judge; None for an error or a result the ledger recorded
    ran: tuple[Any] | None = None

    @property
    def draft(self) -> ToolCallEndDraft:
        # a write's tier and amount are its audit row's: the log says what the audit says
        audit = self.audit
        write = audit is not None and audit.kind not in _NO_EFFECT
        return ToolCallEndDraft(
            tool_use_id=self.call.tool_use_id,
            name=self.call.name,
            output=self.content,
            is_error=self.is_error,
            error_code=self.error_code,
            recovery=self.recovery,
            truncated=self.truncated,
            hints=self.hints,
            tier=audit.tier if write and audit is not None else None,
            amount_usd=audit.amount_usd if write and audit is not None else None,
        )


Verdict: TypeAlias = Refused | Pending | Outcome


def error_content(code: str, message: str) -> str:
    return json.dumps({"error": code, "message": message}, ensure_ascii=False)


class Gates:
    """The capabilities of an agent and the gates every call goes through."""

    def __init__(
        self,
        capabilities: Iterable[Capability],
        *,
        store: Store,
        policy: Policy,
        guards: Sequence[Guard],
        authorize: Authorize | None,
        clock: Clock,
        redactor: Redactor,
        default_result_chars: int = DEFAULT_RESULT_CHARS,
        authorize_timeout: float = DEFAULT_AUTHORIZE_TIMEOUT,
    ) -> None:
        self._caps: dict[str, Capability] = {}
        for cap in capabilities:
            if not isinstance(cap, Capability):
                raise ConfigurationError(f"{cap!r} is not a Capability; decorate it @capability")
            if cap.name in self._caps:
                raise ConfigurationError(f"two capabilities are named {cap.name!r}")
            self._caps[cap.name] = cap
        self.store = store
        self.policy = policy
        self.guards = order_guards(guards)
        self.authorize = authorize
        self.authorize_timeout = authorize_timeout
        self.clock = clock
        self.redactor = redactor
        self.default_result_chars = default_result_chars
        self._specs: dict[str, ToolSpec] = {}

    @property
    def names(self) -> list[str]:
        return list(self._caps)

    def get(self, name: str) -> Capability | None:
        return self._caps.get(name)

    def tool_specs(self, allowed: Iterable[str]) -> tuple[ToolSpec, ...]:
        specs = []
        for name in allowed:
            spec = self._specs.get(name)
            if spec is None:
                cap = self._caps[name]
                spec = ToolSpec(cap.name, cap.description, cap.input_schema(), cap.kind.value)
                self._specs[name] = spec
            specs.append(spec)
        return tuple(specs)

    # --- parsing (before step 1, so every call gets its digest once) ------------------------
    def parse(self, tool_use_id: str, name: str, arguments: str | dict[str, Any]) -> ParsedCall:
        raw: dict[str, Any] | None
        if isinstance(arguments, dict):
            raw = arguments
        else:
            try:
                # numbers stay exact: a model's "0.1" must not become a binary float
                loaded = _ARGUMENTS.decode(arguments) if arguments.strip() else {}
            except ValueError:
                loaded = None
            raw = loaded if isinstance(loaded, dict) else None
        cap = self._caps.get(name)
        call = ParsedCall(tool_use_id=tool_use_id, name=name, raw=raw, cap=cap)
        if raw is None:
            call.error = "the arguments were not a JSON object"
        elif cap is not None:
            try:
                call.args = cap.input_model.model_validate(raw)
            except ValidationError as exc:
                call.error = _validation_message(exc)
            else:
                absurd = out_of_range(call.args.model_dump())
                if absurd is not None:
                    call.args, call.error = None, absurd
        call.digest = args_digest(call.args_json)
        return call

    def shown(self, call: ParsedCall) -> dict[str, Any]:
        """The call's arguments as events and audit rows show them: redacted, once."""
        if call._shown is None:
            call._shown = self.redactor.redact(call.args_json)
        return call._shown

    # --- the whole path ---------------------------------------------------------------------
    async def run(self, a: Attempt) -> Verdict:
        """Admit the call; then a write that is not automatic, or that its client executes,
        waits for a person (``Pending``); anything else runs (``Outcome``)."""
        refused = await self.admit(a)
        if refused is not None:
            return refused
        if not a.concurrent and (a.tier != "auto" or a.cap.executor is not Executor.SERVER):
            return await self.pend(a)
        return await self.execute(a)

    # --- steps 1-6 --------------------------------------------------------------------------
    async def admit(self, a: Attempt) -> Refused | None:
        """Steps 1-6; on success the attempt carries its tier, amount and notes."""
        call, scope = a.call, a.scope
        cap = call.cap
        # 1 whitelist
        if cap is None or call.name not in scope.allowed:
            available = ", ".join(sorted(scope.allowed)) or "none"
            return self.refuse(
                a,
                "not_allowed",
                f"There is no capability named {call.name!r} in this run. Available: {available}.",
            )
        # 2 kind ceiling
        if cap.kind not in scope.allowed_kinds:
            return self.refuse(
                a,
                "kind_not_allowed",
                f"{cap.name} is a {cap.kind.value} capability and this run may only use "
                f"{', '.join(sorted(k.value for k in scope.allowed_kinds))}: "
                "propose a plan instead.",
            )
        # 3 validate
        if call.raw is None:
            return self.refuse(
                a, "malformed_call", f"Arguments for {cap.name} must be a JSON object."
            )
        if call.args is None:
            return self.refuse(
                a, "invalid_input", f"Invalid arguments for {cap.name}: {call.error}"
            )
        # 4 guards (pre)
        outcome = await self.run_guards(a, "pre")
        if outcome.block is not None:
            name, _, verdict = outcome.block
            return self.refuse(a, "guard_blocked", f"Blocked by {name}: {verdict.message}")
        notes = (
            tuple(
                GuardNote(
                    guard=g.name,
                    verdict="warn" if v.kind == "warn" else "hint",
                    message=v.message,
                    for_person=v.for_person,
                )
                for g, v in outcome.notes
            )
            if outcome.notes
            else ()
        )
        # 5 authorize (server side; fail closed)
        if not await self.authorized(a):
            return self.refuse(
                a,
                "unauthorized",
                f"{scope.principal.actor_id} is not authorized to use {cap.name}. "
                "Do not retry; tell the person it is not permitted.",
            )
        # 6 policy (an auto write's spend is reserved here, in the store)
        try:
            decision = await self.decide(a, held_by=outcome.needs_person, reserve=True)
        except CapabilityError as exc:  # an amount beyond any sane range
            return self.refuse(
                a, "invalid_input", f"Invalid arguments for {cap.name}: {exc.message}."
            )
        if decision.tier == "deny":
            return self.refuse(
                a, "policy_denied", f"{cap.name} is not permitted: {decision.reason}."
            )
        if decision.limited or decision.outside:  # the card says why it waits for a person
            why = "daily_limit" if decision.limited else "outside_event"
            person = f"This waits for you because {decision.reason}."
            notes += (
                GuardNote(guard=why, verdict="warn", message=decision.reason, for_person=person),
            )
        a.tier, a.amount_usd, a.notes = decision.tier, decision.amount_usd, notes
        return None

    def refuse(self, a: Attempt, reason: RejectReason, message: str) -> Refused:
        """The call does not run, for ``reason``: the model is told ``message`` (redacted)."""
        message = self.redactor.redact_text(message)
        call = a.call
        audit = None
        if call.cap is not None:
            audit = self._audit(a, f"rejected:{reason}", None, None, output=message, key=None)
        return Refused(call, reason, message, audit)

    async def run_guards(
        self, a: Attempt, phase: Literal["pre", "post"], output: Any = None
    ) -> GuardOutcome:
        if not self.guards:
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
            now=self.clock.now(),
            output=output,
        )
        outcome = await run_guards(self.guards, gcall, phase)
        redact = self.redactor.redact_text
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

    async def authorized(self, a: Attempt) -> bool:
        """Step 5: the host's verdict on the server; reads need none; no callback → denied."""
        cap = a.cap
        if cap.kind not in _AUTHORIZED:
            return True
        if self.authorize is None:
            return False
        request = AuthorizationRequest(
            capability=cap,
            args=a.args.model_dump(mode="json"),  # its own copy: the callback is host code
            principal=a.scope.principal,
            run_id=a.scope.run_id,
            tool_use_id=a.call.tool_use_id,
        )
        try:
            verdict = self.authorize(request)
            if inspect.isawaitable(verdict):
                # a hung authorizer would hold the principal's lock, and every write behind it
                async with asyncio.timeout(self.authorize_timeout):
                    verdict = await verdict
        except TimeoutError:  # no answer is a refusal
            log.warning(
                "authorize did not answer within %gs; denying %s", self.authorize_timeout, cap.name
            )
            return False
        except Exception:  # an authorizer that fails denies
            log.exception("authorize callback failed; denying %s", cap.name)
            return False
        return verdict is True

    async def decide(
        self, a: Attempt, *, held_by: Sequence[str] = (), reserve: bool = False
    ) -> PolicyDecision:
        """Step 6. ``held_by``: the guards that hold the call for a person (``Verdict.confirm``).
        ``reserve``: the call runs now if it is auto, so an auto write that counts toward the
        daily limit reserves its amount in the store (checked and reserved in one transaction:
        the limit holds for every agent and process sharing the store); refused, it goes to a
        person like any call over the limit."""
        cap, args = a.cap, a.args
        if not cap.is_write:
            return _READS
        ctx, origin = self.context(a), a.scope.origin()
        amount = await cap.amount(args, ctx)
        limit = self.policy.daily_autonomous_limit_usd
        if limit is None or amount is None:
            return self.policy.decide(cap, amount, held_by=held_by, origin=origin)
        principal = a.scope.principal.actor_id
        since = self.policy.day_start(self.clock.now())
        if not (reserve and cap.executor is Executor.SERVER):
            spent = await self.store.autonomous_spend(principal, since=since)
            return self.policy.decide(
                cap, amount, spent_today=spent, held_by=held_by, origin=origin
            )
        # the tier before the day's spend; the store then checks the spend, this call's own
        # reservation (a replay after a crash) not counted twice
        decision = self.policy.decide(cap, amount, held_by=held_by, origin=origin)
        if decision.tier != "auto" and not decision.limited:
            return decision
        key, now = ctx.idempotency_key, self.clock.now()
        if decision.tier == "auto" and await self.store.reserve_autonomous(
            principal, amount, limit=limit, since=since, key=key, at=now
        ):
            return decision
        spent = await self.store.autonomous_spend(principal, since=since)  # for the reason
        return self.policy.over_limit(amount, spent)

    def context(self, a: Attempt) -> CallContext:
        """The handler's context of the call, made once per attempt (its idempotency key)."""
        if a._ctx is not None:
            return a._ctx
        cap, scope, tool_use_id = a.cap, a.scope, a.call.tool_use_id
        ctx = CallContext(
            run_id=scope.run_id,
            principal=scope.principal,
            tool_use_id=tool_use_id,
            capability=cap.name,
            idempotency_key="",
            clock=self.clock,
        )
        # the call's digest is that of its validated arguments: computed once, at parsing
        ctx.idempotency_key = cap.make_key(a.args, ctx, digest=a.call.digest or None)

        async def progress(message: str, pct: float | None) -> None:
            await scope.report(
                ToolProgressDraft(
                    tool_use_id=tool_use_id,
                    name=cap.name,
                    message=self.redactor.redact_text(message),
                    pct=pct,
                )
            )

        ctx._progress = progress
        a._ctx = ctx
        return ctx

    # --- waiting for a person ---------------------------------------------------------------
    async def pend(self, a: Attempt) -> Pending:
        """The approval an admitted call waits for, and the card the person is shown."""
        cap, call, scope, redactor = a.cap, a.call, a.scope, self.redactor
        now = self.clock.now()
        tier: Literal["confirm", "explicit"] = "explicit" if a.tier == "explicit" else "confirm"
        args = call.args_json
        record = ApprovalRecord(
            approval_id=uuid4(),
            run_id=scope.run_id,
            tool_use_id=call.tool_use_id,
            principal=scope.principal.actor_id,
            capability=cap.name,
            args=args,
            args_digest=call.digest or args_digest(args),
            tier=tier,
            amount_usd=a.amount_usd,
            modifiable_fields=cap.modifiable_fields,
            executor=cap.executor.value,
            status="pending",
            created_at=now,
            expires_at=now + timedelta(seconds=self.policy.approval_ttl_seconds),
        )
        draft = PendingActionDraft(
            approval_id=record.approval_id,
            tool_use_id=call.tool_use_id,
            name=cap.name,
            input=self.shown(call),
            description=redactor.redact_text(await cap.description_of(a.args, a.amount_usd)),
            amount_usd=a.amount_usd,
            tier=tier,
            acknowledge="amount" if tier == "explicit" else None,
            modifiable_fields=list(cap.modifiable_fields),
            guard_notes=[n.redacted(redactor.redact_text) for n in a.notes],
            expires_at=record.expires_at,
            args_digest=record.args_digest,
            executor=cap.executor.value,
        )
        audit = self._audit(a, "pending", tier, a.amount_usd, output=None, key=None)
        return Pending(record, draft, audit)

    # --- steps 7-11 -------------------------------------------------------------------------
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
        audit = self._audit(a, "ok", a.tier, a.amount_usd, content, ctx.idempotency_key, started)
        return Outcome(
            call,
            content,
            truncated=truncated,
            hints=hints,
            audit=audit,
            recovery=a.recovery,
            ran=(output,),
        )

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
        audit = self._audit(a, outcome, a.tier, a.amount_usd, content, key, started)
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
            audit = self._audit(a, "ledger", a.tier, a.amount_usd, content, entry.key, started)
            return Outcome(call, content, truncated=truncated, recovery="ledger", audit=audit)
        if entry.status == "failed":
            try:
                err = json.loads(entry.error or "{}")
            except ValueError:
                err = {}
            code = str(err.get("code") or "failed")
            content = error_content(code, str(err.get("message", "")))
            audit = self._audit(a, "ledger", a.tier, a.amount_usd, content, entry.key, started)
            return Outcome(
                call, content, is_error=True, error_code=code, recovery="ledger", audit=audit
            )
        message = (
            f"{cap.name} was started before an interruption and its outcome is unknown. It will "
            "not be run again. Check the current state with a read capability before anything "
            "else, then tell the person what happened."
        )
        content = error_content("outcome_unknown", message)
        audit = self._audit(a, "unknown", a.tier, a.amount_usd, content, entry.key, started)
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
            audit = self._audit(a, "error", a.tier, a.amount_usd, content, None)
            return Outcome(a.call, content, is_error=True, error_code="invalid_output", audit=audit)
        content, truncated = self.render(cap, output, [])
        audit = self._audit(a, "ok", a.tier, a.amount_usd, content, None)
        return Outcome(a.call, content, truncated=truncated, audit=audit)

    def render(self, cap: Capability, output: Any, hints: Sequence[str]) -> tuple[str, bool]:
        """The text the model sees: JSON, cut to the result budget, then guard notes."""
        budget = cap.max_result_chars or self.default_result_chars
        return render_result(cap, output, hints, budget, self.redactor.redact_text)

    def _audit(
        self,
        a: Attempt,
        outcome: str,
        tier: str | None,
        amount_usd: Decimal | None,
        output: str | None,
        key: str | None,
        started: float | None = None,
    ) -> AuditRecord:
        call, cap, scope = a.call, a.call.cap, a.scope
        assert cap is not None  # calls of unknown capabilities leave no audit row
        return AuditRecord(
            run_id=scope.run_id,
            at=self.clock.now(),
            principal=scope.principal.actor_id,
            capability=cap.name,
            kind=cap.kind.value,
            tool_use_id=call.tool_use_id,
            outcome=outcome,
            tier=tier,
            amount_usd=amount_usd,
            input=self.shown(call),
            output=output if output is None else output[:4000],
            idempotency_key=key,
            duration_ms=None if started is None else (time.perf_counter() - started) * 1000,
        )


# what json.loads(text, parse_float=Decimal) builds at each call, built once
_ARGUMENTS = json.JSONDecoder(parse_float=Decimal)
_READS = PolicyDecision("auto", "reads and previews run on their own", None)
_AUTHORIZED = frozenset({Kind.PROPOSE, Kind.APPROVE, Kind.EXECUTE})  # (enum lookups, once)
_NO_EFFECT = frozenset({Kind.READ.value, Kind.PREVIEW.value})


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


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:8]:
        loc = ".".join(str(p) for p in err["loc"]) or "(input)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
