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
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeAlias
from uuid import UUID, uuid4

from pydantic import ValidationError

from ._gates.attempt import (
    Attempt,
    CallScope,
    Outcome,
    ParsedCall,
    Pending,
    Refused,
    Verdict,
)
from ._gates.execution import Execution
from ._gates.guarding import guarded
from ._logs import logger
from .capabilities import (
    CallContext,
    Capability,
    Executor,
    Kind,
    Principal,
    args_digest,
    out_of_range,
)
from .clock import Clock
from .events import (
    GuardNote,
    PendingActionDraft,
    RejectReason,
    ToolProgressDraft,
)
from .exceptions import CapabilityError, ConfigurationError
from .guards import Guard, GuardOutcome, order_guards
from .models.base import ToolSpec
from .policy import Policy, PolicyDecision
from .redaction import Redactor
from .steps import CardStep
from .stores.base import ApprovalRecord, AuditRecord, Store

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
        self._execution = Execution(
            store=store,
            clock=clock,
            redactor=redactor,
            default_result_chars=default_result_chars,
            context=self.context,
            audit_row=self.audit_row,
        )

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
            audit = self.audit_row(a, f"rejected:{reason}", None, None, output=message, key=None)
        return Refused(call, reason, message, audit)

    async def run_guards(
        self, a: Attempt, phase: Literal["pre", "post"], output: Any = None
    ) -> GuardOutcome:
        """Steps 4 and 10: the guards of ``phase``; their notes and block reported to the run."""
        return await guarded(
            self.guards, a, phase, output, now=self.clock.now(), redact=self.redactor.redact_text
        )

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
            deps=scope.deps,
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
        if cap.steps is not None:
            ctx.step_books = self._execution.step_books(a, ctx)
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
            quoted_at=await _quoted_at(a, self.context(a)),
            steps=_card_steps(a, self.context(a)),
        )
        audit = self.audit_row(a, "pending", tier, a.amount_usd, output=None, key=None)
        return Pending(record, draft, audit)

    def render(self, cap: Capability, output: Any, hints: Sequence[str]) -> tuple[str, bool]:
        """The text the model sees: JSON, cut to the result budget, then guard notes."""
        return self._execution.render(cap, output, hints)

    # --- steps 7-11 (_gates/execution.py) ---------------------------------------------------
    async def execute(self, a: Attempt) -> Outcome:
        """Run an admitted (or approved) call (``Execution.execute``)."""
        return await self._execution.execute(a)

    async def recorded(self, a: Attempt, *, resuming: bool = True) -> Outcome | None:
        """What the ledger recorded of the call (``Execution.recorded``)."""
        return await self._execution.recorded(a, resuming=resuming)

    async def resumable(self, a: Attempt) -> bool:
        """A ``resume`` call an interruption left started (``Execution.resumable``)."""
        return await self._execution.resumable(a)

    def client_result(self, a: Attempt, result: Any) -> Outcome:
        """The outcome of a call its client executed (``Execution.client_result``)."""
        return self._execution.client_result(a, result)

    def audit_row(
        self,
        a: Attempt,
        outcome: str,
        tier: str | None,
        amount_usd: Decimal | None,
        output: str | None,
        key: str | None,
        started: float | None = None,
    ) -> AuditRecord:
        """The audit row of the attempt, with its outcome."""
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


def _card_steps(a: Attempt, ctx: CallContext) -> list[CardStep] | None:
    """The steps of a call made of steps, for its card (None: one step, or unknown)."""
    try:
        return a.cap.card_steps(a.args, ctx)
    except Exception:  # host code: the card says less, the call still waits
        log.exception("%s: its steps could not be shown", a.cap.name)
        return None


async def _quoted_at(a: Attempt, ctx: CallContext) -> datetime | None:
    """When the price of the call was quoted, for the card (None: unknown, or unasked)."""
    try:
        return await a.cap.quote_time(a.args, ctx)
    except Exception:  # host code: a card without the quote's age, never a failed call
        log.exception("%s: quoted_at failed", a.cap.name)
        return None


# what json.loads(text, parse_float=Decimal) builds at each call, built once
_ARGUMENTS = json.JSONDecoder(parse_float=Decimal)
_READS = PolicyDecision("auto", "reads and previews run on their own", None)
_AUTHORIZED = frozenset({Kind.PROPOSE, Kind.APPROVE, Kind.EXECUTE})  # (enum lookups, once)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:8]:
        loc = ".".join(str(p) for p in err["loc"]) or "(input)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
