"""The gate pipeline of one tool call.

``Registry.admit`` runs steps 1-6 (whitelist, kind ceiling, input validation, pre-guards,
server-side authorization, policy) and says whether the call may run, must wait for a person, or
is refused. ``Registry.execute`` runs steps 7-11 (ledger, execution with timeout, output
validation, post-guards, redaction + result budget + audit). The loop emits the events; this
module decides.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypeAlias
from uuid import UUID

from pydantic import BaseModel, ValidationError

from ._logs import logger
from ._text import NOTES_MARKER, TRUNCATION_MARKER
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
from .events import GuardNote, RejectReason
from .exceptions import CapabilityError, ConfigurationError
from .guards import Guard, GuardCall, GuardOutcome, RunHistory, order_guards, run_guards
from .models.base import ToolSpec
from .policy import Policy, PolicyDecision
from .redaction import Redactor
from .stores.base import AuditRecord, LedgerEntry, Store

__all__ = [
    "Admitted",
    "AuthorizationRequest",
    "Authorize",
    "CallScope",
    "Outcome",
    "ParsedCall",
    "Refused",
    "Registry",
]

log = logger("fiduciary.registry")

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


@dataclass(slots=True)
class CallScope:
    """What one run gives the pipeline: who, which capabilities, what happened so far."""

    run_id: UUID
    principal: Principal
    allowed: frozenset[str]
    allowed_kinds: frozenset[Kind]
    history: RunHistory
    report_guard: Callable[[str, str, str, str, str, str], Awaitable[None]]
    report_progress: Callable[[str, str, str, float | None], Awaitable[None]]


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

    @property
    def args_json(self) -> dict[str, Any]:
        if self.args is not None:
            return self.args.model_dump(mode="json")
        return self.raw or {}


@dataclass(frozen=True, slots=True)
class Refused:
    reason: RejectReason
    message: str


@dataclass(frozen=True, slots=True)
class Admitted:
    call: ParsedCall
    cap: Capability
    args: BaseModel
    decision: PolicyDecision
    notes: tuple[GuardNote, ...]


@dataclass(slots=True)
class Outcome:
    """The result of one executed call, ready for the model, the event and the audit row."""

    content: str
    is_error: bool = False
    error_code: str | None = None
    recovery: Literal["replayed", "ledger", "unknown"] | None = None
    truncated: bool = False
    hints: list[str] = field(default_factory=list)
    audit: AuditRecord | None = None
    ok_output: Any = None


def error_content(code: str, message: str) -> str:
    return json.dumps({"error": code, "message": message}, ensure_ascii=False)


class Registry:
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
                spec = ToolSpec(cap.name, cap.description, cap.input_schema())
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
                loaded = json.loads(arguments, parse_float=Decimal) if arguments.strip() else {}
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

    # --- steps 1-6 --------------------------------------------------------------------------
    async def admit(self, scope: CallScope, call: ParsedCall) -> Admitted | Refused:
        cap = call.cap
        # 1 whitelist
        if cap is None or call.name not in scope.allowed:
            available = ", ".join(sorted(scope.allowed)) or "none"
            return Refused(
                "not_allowed",
                f"There is no capability named {call.name!r} in this run. Available: {available}.",
            )
        # 2 kind ceiling
        if cap.kind not in scope.allowed_kinds:
            return Refused(
                "kind_not_allowed",
                f"{cap.name} is a {cap.kind.value} capability and this run may only use "
                f"{', '.join(sorted(k.value for k in scope.allowed_kinds))}: "
                "propose a plan instead.",
            )
        # 3 validate
        if call.raw is None:
            return Refused("malformed_call", f"Arguments for {cap.name} must be a JSON object.")
        if call.args is None:
            return Refused("invalid_input", f"Invalid arguments for {cap.name}: {call.error}")
        args = call.args
        # 4 guards (pre)
        outcome = await self.run_guards(scope, call, args, "pre")
        if outcome.block is not None:
            name, _, verdict = outcome.block
            return Refused("guard_blocked", f"Blocked by {name}: {verdict.message}")
        notes = tuple(
            GuardNote(
                guard=g.name, verdict="warn" if v.kind == "warn" else "hint", message=v.message
            )
            for g, v in outcome.notes
        )
        # 5 authorize (server side; fail closed)
        if not await self.authorized(scope, call, cap, args):
            return Refused(
                "unauthorized",
                f"{scope.principal.actor_id} is not authorized to use {cap.name}. "
                "Do not retry; tell the person it is not permitted.",
            )
        # 6 policy (an auto write's spend is reserved here, in the store)
        try:
            decision = await self.decide(
                scope, cap, args, call.tool_use_id, held_by=outcome.needs_person, reserve=True
            )
        except CapabilityError as exc:  # an amount beyond any sane range
            return Refused("invalid_input", f"Invalid arguments for {cap.name}: {exc.message}.")
        if decision.tier == "deny":
            return Refused("policy_denied", f"{cap.name} is not permitted: {decision.reason}.")
        if decision.limited:  # the card says why this call waits for a person
            notes += (GuardNote(guard="daily_limit", verdict="warn", message=decision.reason),)
        return Admitted(call=call, cap=cap, args=args, decision=decision, notes=notes)

    async def run_guards(
        self,
        scope: CallScope,
        call: ParsedCall,
        args: BaseModel,
        phase: Literal["pre", "post"],
        output: Any = None,
    ) -> GuardOutcome:
        if not self.guards:
            return GuardOutcome()
        assert call.cap is not None
        gcall = GuardCall(
            capability=call.cap,
            args=args.model_dump(mode="json"),
            args_digest=call.digest,
            tool_use_id=call.tool_use_id,
            run_id=scope.run_id,
            principal=scope.principal,
            history=scope.history,
            now=self.clock.now(),
            output=output,
        )
        outcome = await run_guards(self.guards, gcall, phase)
        for guard, verdict in outcome.notes:
            await scope.report_guard(
                call.tool_use_id, guard.name, guard.tier, phase, verdict.kind, verdict.message
            )
        if outcome.block is not None:
            name, tier, verdict = outcome.block
            await scope.report_guard(call.tool_use_id, name, tier, phase, "block", verdict.message)
        return outcome

    async def authorized(
        self, scope: CallScope, call: ParsedCall, cap: Capability, args: BaseModel
    ) -> bool:
        """Step 5: the host's verdict on the server; reads need none; no callback → denied."""
        if cap.kind not in (Kind.PROPOSE, Kind.APPROVE, Kind.EXECUTE):
            return True
        if self.authorize is None:
            return False
        request = AuthorizationRequest(
            capability=cap,
            args=args.model_dump(mode="json"),
            principal=scope.principal,
            run_id=scope.run_id,
            tool_use_id=call.tool_use_id,
        )
        try:
            verdict = self.authorize(request)
            if inspect.isawaitable(verdict):
                # a hung authorizer would hold the principal's lock, and every write behind it
                verdict = await asyncio.wait_for(verdict, timeout=self.authorize_timeout)
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
        self,
        scope: CallScope,
        cap: Capability,
        args: BaseModel,
        tool_use_id: str,
        *,
        held_by: Sequence[str] = (),
        reserve: bool = False,
    ) -> PolicyDecision:
        """Step 6. ``held_by``: the guards that hold the call for a person (``Verdict.confirm``).
        ``reserve``: the call runs now if it is auto, so an auto write that counts toward the
        daily limit reserves its amount in the store (checked and reserved in one transaction:
        the limit holds for every agent and process sharing the store); refused, it goes to a
        person like any call over the limit."""
        if not cap.is_write:
            return PolicyDecision("auto", "reads and previews run on their own", None)
        ctx = self.context(scope, cap, args, tool_use_id)
        amount = await cap.amount(args, ctx)
        limit = self.policy.daily_autonomous_limit_usd
        if limit is None or amount is None:
            return self.policy.decide(cap, amount, held_by=held_by)
        principal = scope.principal.actor_id
        since = self.policy.day_start(self.clock.now())
        if not (reserve and cap.executor is Executor.SERVER):
            spent = await self.store.autonomous_spend(principal, since=since)
            return self.policy.decide(cap, amount, spent_today=spent, held_by=held_by)
        # the tier before the day's spend; the store then checks the spend, this call's own
        # reservation (a replay after a crash) not counted twice
        decision = self.policy.decide(cap, amount, held_by=held_by)
        if decision.tier != "auto" and not decision.limited:
            return decision
        key, now = ctx.idempotency_key, self.clock.now()
        if decision.tier == "auto" and await self.store.reserve_autonomous(
            principal, amount, limit=limit, since=since, key=key, at=now
        ):
            return decision
        spent = await self.store.autonomous_spend(principal, since=since)  # for the reason
        return self.policy.over_limit(amount, spent)

    def context(
        self, scope: CallScope, cap: Capability, args: BaseModel, tool_use_id: str
    ) -> CallContext:
        ctx = CallContext(
            run_id=scope.run_id,
            principal=scope.principal,
            tool_use_id=tool_use_id,
            capability=cap.name,
            idempotency_key="",
            clock=self.clock,
        )
        ctx.idempotency_key = cap.make_key(args, ctx)

        async def progress(message: str, pct: float | None) -> None:
            await scope.report_progress(tool_use_id, cap.name, message, pct)

        ctx._progress = progress
        return ctx

    # --- steps 7-11 -------------------------------------------------------------------------
    async def execute(
        self,
        scope: CallScope,
        cap: Capability,
        call: ParsedCall,
        args: BaseModel,
        *,
        epoch: int,
        tier: str | None,
        amount_usd: Decimal | None,
        recovery: Literal["replayed"] | None = None,
        notes: Sequence[GuardNote] = (),
    ) -> Outcome:
        """Run an admitted call. ``epoch`` is the caller's lease epoch of the run: the ledger
        row is refused with ``StaleEpochError`` (and the handler not entered) if the run was
        taken over since."""
        ctx = self.context(scope, cap, args, call.tool_use_id)
        started = time.perf_counter()
        # 7 ledger: a non-replayable call runs at most once per key, and only by the lease holder
        if cap.replay is Replay.NEVER:
            entry = LedgerEntry(
                key=ctx.idempotency_key,
                run_id=scope.run_id,
                tool_use_id=call.tool_use_id,
                capability=cap.name,
                status="started",
                started_at=self.clock.now(),
            )
            existing = await self.store.ledger_begin(entry, epoch=epoch)
            if existing is not None and not (
                _retryable(existing)
                and await self.store.ledger_retry(existing.key, at=entry.started_at)
            ):
                return self._from_ledger(scope, cap, call, args, existing, tier, amount_usd)
        # 8 execute with timeout
        try:
            try:
                raw = await asyncio.wait_for(cap.invoke(args, ctx), timeout=cap.timeout)
            except BaseException:
                # tell a handler still running in a thread (sync handlers cannot be cancelled)
                ctx.cancelled.set()
                raise
            # 9 validate output (extra fields dropped)
            output = cap.dump_output(raw)
        except CapabilityError as exc:
            if tier == "auto" and cap.is_write and recovery is None:
                # refused before any effect: its reservation no longer counts (a replayed call
                # keeps it: the attempt before the crash may have acted)
                await self.store.release_autonomous(ctx.idempotency_key)
            return await self._failed(
                scope,
                cap,
                call,
                args,
                ctx,
                exc.code,
                self.redactor.redact_text(exc.message),
                tier,
                amount_usd,
                started,
                effect_possible=False,
            )
        except TimeoutError:
            return await self._failed(
                scope,
                cap,
                call,
                args,
                ctx,
                "timeout",
                f"{cap.name} did not finish within {cap.timeout:g}s.",
                tier,
                amount_usd,
                started,
                effect_possible=True,
            )
        except ValidationError:
            log.warning("%s returned output that does not match its declared type", cap.name)
            return await self._failed(
                scope,
                cap,
                call,
                args,
                ctx,
                "invalid_output",
                f"{cap.name} ran but its result did not match its declared output.",
                tier,
                amount_usd,
                started,
                effect_possible=True,
            )
        except Exception as exc:
            log.exception("handler of %s failed", cap.name)
            return await self._failed(
                scope,
                cap,
                call,
                args,
                ctx,
                "handler_error",
                f"{cap.name} failed unexpectedly ({type(exc).__name__}).",
                tier,
                amount_usd,
                started,
                effect_possible=True,
            )
        # 10 guards (post): hints for the model
        post = await self.run_guards(scope, call, args, "post", output=output)
        hints = [n.message for n in notes] + [v.message for _, v in post.notes]
        # 11 redact, truncate, audit
        safe = self.redactor.redact(output)
        content, truncated = self.render(cap, safe, hints)
        if cap.replay is Replay.NEVER:
            await self.store.ledger_finish(
                ctx.idempotency_key, status="done", at=self.clock.now(), result=safe
            )
        audit = self.audit(
            scope, cap, call, "ok", tier, amount_usd, args, content, ctx.idempotency_key, started
        )
        return Outcome(
            content=content,
            truncated=truncated,
            hints=hints,
            audit=audit,
            recovery=recovery,
            ok_output=safe,
        )

    async def _failed(
        self,
        scope: CallScope,
        cap: Capability,
        call: ParsedCall,
        args: BaseModel,
        ctx: CallContext,
        code: str,
        message: str,
        tier: str | None,
        amount_usd: Decimal | None,
        started: float,
        *,
        effect_possible: bool,
    ) -> Outcome:
        if effect_possible and cap.is_write:
            message += (
                " Its outcome is unknown: check the current state with a read capability "
                "before doing anything else, and do not simply retry."
            )
        if cap.replay is Replay.NEVER:
            await self.store.ledger_finish(
                ctx.idempotency_key,
                status="failed",
                at=self.clock.now(),
                error=json.dumps({"code": code, "message": message, "unknown": effect_possible}),
            )
        content = error_content(code, message)
        # "unknown": the call may have acted (it counts toward the daily autonomous limit)
        outcome = "unknown" if effect_possible and cap.is_write else "error"
        audit = self.audit(
            scope, cap, call, outcome, tier, amount_usd, args, content, ctx.idempotency_key, started
        )
        return Outcome(content=content, is_error=True, error_code=code, audit=audit)

    def _from_ledger(
        self,
        scope: CallScope,
        cap: Capability,
        call: ParsedCall,
        args: BaseModel,
        entry: LedgerEntry,
        tier: str | None,
        amount_usd: Decimal | None,
    ) -> Outcome:
        """A second attempt with a key already in the ledger: never execute again."""
        started = time.perf_counter()
        if entry.status == "done":
            content, truncated = self.render(cap, entry.result, [])
            audit = self.audit(
                scope, cap, call, "ledger", tier, amount_usd, args, content, entry.key, started
            )
            return Outcome(
                content=content,
                truncated=truncated,
                recovery="ledger",
                audit=audit,
                ok_output=entry.result,
            )
        if entry.status == "failed":
            try:
                err = json.loads(entry.error or "{}")
            except ValueError:
                err = {}
            code = str(err.get("code") or "failed")
            content = error_content(code, str(err.get("message", "")))
            audit = self.audit(
                scope, cap, call, "ledger", tier, amount_usd, args, content, entry.key, started
            )
            return Outcome(
                content=content,
                is_error=True,
                error_code=code,
                recovery="ledger",
                audit=audit,
            )
        message = (
            f"{cap.name} was started before an interruption and its outcome is unknown. It will "
            "not be run again. Check the current state with a read capability before anything "
            "else, then tell the person what happened."
        )
        content = error_content("outcome_unknown", message)
        audit = self.audit(
            scope, cap, call, "unknown", tier, amount_usd, args, content, entry.key, started
        )
        return Outcome(
            content=content,
            is_error=True,
            error_code="outcome_unknown",
            recovery="unknown",
            audit=audit,
        )

    def recorded(
        self,
        scope: CallScope,
        cap: Capability,
        call: ParsedCall,
        args: BaseModel,
        entry: LedgerEntry,
    ) -> Outcome:
        return self._from_ledger(scope, cap, call, args, entry, None, None)

    def render(self, cap: Capability, output: Any, hints: Sequence[str]) -> tuple[str, bool]:
        """The text the model sees: JSON, cut to the result budget, then guard notes."""
        body = json.dumps(output, ensure_ascii=False, default=str)
        budget = cap.max_result_chars or self.default_result_chars
        truncated = len(body) > budget
        if truncated:
            body = (
                body[:budget]
                + f"{TRUNCATION_MARKER}{len(body) - budget} chars: the result was too large; "
                "narrow the request (a filter, a limit, a shorter period)]"
            )
        if hints:
            body += NOTES_MARKER + " ".join(f"- {h}" for h in hints)
        return body, truncated

    def audit(
        self,
        scope: CallScope,
        cap: Capability,
        call: ParsedCall,
        outcome: str,
        tier: str | None,
        amount_usd: Decimal | None,
        args: BaseModel | None,
        output: str | None,
        key: str | None,
        started: float | None = None,
    ) -> AuditRecord:
        data = args.model_dump(mode="json") if args is not None else (call.raw or {})
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
            input=self.redactor.redact(data),
            output=output if output is None else output[:4000],
            idempotency_key=key,
            duration_ms=None if started is None else (time.perf_counter() - started) * 1000,
        )


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
