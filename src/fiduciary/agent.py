"""``Agent``: the configuration of an agent and its run / resume / approve API.

An agent is stateless between calls: a run lives in the store, so any process with the same
store can continue it, decide its approvals or follow its events.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar, overload
from uuid import UUID

from . import questions as _questions
from ._agent import cancelling as _cancelling
from ._agent import decisions as _decisions
from ._agent import delegated as _delegated
from ._agent.built import Built, Parts, assemble
from ._agent.following import run_events
from ._agent.options import DEFAULT_SYSTEM, AgentOptions, option_names, replaced
from ._agent.runs import Shared
from ._agent.sweep import SWEEP_SECONDS, keep_moving, resume_once
from ._logs import REDACT_LOGS
from ._loop import Held
from .capabilities import Capability, Principal, principal_of
from .clock import Clock
from .context.compaction import Summarizer
from .context.config import DomainContext
from .context.recall import MemoryLayer
from .context.skills import Skill
from .delegation import Delegation
from .deps import Dependencies, DepsFactory
from .events import Event, Origin
from .exceptions import ConfigurationError
from .gates import DEFAULT_AUTHORIZE_TIMEOUT, Authorize, Gates
from .guards import Guard
from .models.base import Model
from .models.pricing import PriceTable
from .models.tiers import Effort, Tier
from .outputs import DEFAULT_OUTPUT_RETRIES, OutputTypes
from .policy import Policy
from .redaction import Redactor
from .signed_approvals import SignatureCheck
from .stores.base import ApprovalRecord, ApprovalStatus, RunRecord, RunStatus, Store, existing_run
from .text_guards import TextGuard
from .tracing import RunTracer

if TYPE_CHECKING:
    from .context.memory import Memory

__all__ = ["DEFAULT_SYSTEM", "Agent", "AgentOptions"]

T = TypeVar("T")


class _Option(Generic[T]):
    """An option read on the agent (``agent.policy`` is ``agent.options.policy``); assigning
    one is refused, naming ``with_options``."""

    __slots__ = ("built", "name")

    def __init__(self, *, built: bool = False) -> None:
        self.name = ""
        self.built = built  # what is built of the options, rather than one of them

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, agent: None, owner: type) -> _Option[T]: ...
    @overload
    def __get__(self, agent: _Readable, owner: type) -> T: ...
    def __get__(self, agent: _Readable | None, owner: type) -> T | _Option[T]:
        if agent is None:
            return self
        value: T = getattr(
            agent._parts.built if self.built else agent._parts.built.options, self.name
        )
        return value

    def __set__(self, agent: _Readable, value: NoReturn) -> NoReturn:
        raise _frozen(self.name)


def _frozen(name: str) -> AttributeError:
    if name in option_names():
        return AttributeError(
            f"an Agent's options are frozen: agent.with_options({name}=...) returns an agent "
            f"with another {name} (sharing the rest)"
        )
    return AttributeError(
        f"an Agent is frozen: {name!r} cannot be set; agent.with_options(...) returns an agent "
        "with other options"
    )


class _Readable:
    """An agent's options and what is built of them, read as attributes (frozen: assigning
    one is refused, naming ``with_options``)."""

    # the options, read-only (``with_options`` for another agent)
    model: _Option[Model] = _Option()
    store: _Option[Store] = _Option()
    policy: _Option[Policy] = _Option()
    clock: _Option[Clock] = _Option()
    redactor: _Option[Redactor] = _Option()
    system: _Option[tuple[str, ...]] = _Option()
    max_turns: _Option[int] = _Option()
    max_tool_calls: _Option[int] = _Option()
    model_settings: _Option[Mapping[str, Any]] = _Option()
    lease_seconds: _Option[float] = _Option()
    model_tier: _Option[Tier | None] = _Option()
    thinking_effort: _Option[Effort | None] = _Option()
    budget_usd: _Option[Decimal | None] = _Option()
    prices: _Option[PriceTable | None] = _Option()
    context: _Option[DomainContext | None] = _Option()
    remember_replies: _Option[bool] = _Option()
    remember_after_run: _Option[Callable[[str], Awaitable[object]] | None] = _Option()
    context_window: _Option[int | None] = _Option()
    compact_at: _Option[float] = _Option()
    summarizer: _Option[Summarizer | None] = _Option()
    microcompact: _Option[bool] = _Option()
    signatures: _Option[SignatureCheck | None] = _Option()
    tracer: _Option[RunTracer] = _Option()
    drives_replays: _Option[bool] = _Option()
    # what it was given (frozen), and what is built of it
    options: _Option[AgentOptions] = _Option(built=True)
    gates: _Option[Gates] = _Option(built=True)  # the capabilities (and use_skill), their gates
    skills: _Option[Mapping[str, Skill]] = _Option(built=True)  # by name
    memory: _Option[MemoryLayer | None] = _Option(built=True)  # the loop's (options.memory: given)
    outputs: _Option[OutputTypes] = _Option(built=True)  # its runs' answer types, by name
    deps: _Option[Dependencies] = _Option(built=True)  # the application's, for its runs

    owner: _Option[str] = _Option(built=True)  # the lease owner it drives runs as (shared)

    __slots__ = ("__weakref__", "_parts")
    _parts: Parts  # the options, what is built of them (once), and what is shared


class _Decisions(_Readable):
    """The decisions on an agent's pending actions (the work is ``_agent/decisions.py``):
    a base of ``Agent`` so that its class keeps to one page."""

    __slots__ = ()

    async def approve(
        self,
        approval_id: UUID,
        *,
        by: Principal | str,
        edits: Mapping[str, Any] | None = None,
        confirm_amount: Decimal | str | None = None,
        args_digest: str | None = None,
        assertion: Any = None,
    ) -> ApprovalRecord:
        """Approve a pending action (optionally editing its modifiable fields).

        The decision is recorded durably; the run continues with ``resume(run_id)`` (here or in
        any other process). The approval executes exactly the approved arguments. Raises
        ``ApprovalError`` (and changes nothing) when the approval is unknown, decided, expired,
        someone else's, does not match ``args_digest``, edits a field that is not modifiable,
        or needs the amount re-typed (``confirm_amount``) and did not get it, or must be
        signed (the policy's ``signatures``) and ``assertion`` is missing or refused.
        """
        return await _decisions.approve(
            self._parts.deciding,
            approval_id,
            by=by,
            edits=edits,
            confirm_amount=confirm_amount,
            args_digest=args_digest,
            assertion=assertion,
        )

    async def signing_binding(
        self,
        approval_id: UUID,
        *,
        by: Principal | str,
        edits: Mapping[str, Any] | None = None,
        args_digest: str | None = None,
    ) -> dict[str, str | None]:
        """What ``by`` signs to approve with ``edits``: the binding ``approve`` will check
        (its WebAuthn challenge: ``signed_approvals.challenge``); ``ApprovalError`` as there."""
        return await _decisions.signing_binding(
            self._parts.deciding, approval_id, by=by, edits=edits, args_digest=args_digest
        )

    async def deny(
        self, approval_id: UUID, *, by: Principal | str, reason: str = ""
    ) -> ApprovalRecord:
        """Decline a pending action: it never executes; the model is told, with the reason."""
        return await _decisions.deny(self._parts.deciding, approval_id, by=by, reason=reason)

    async def regenerate(
        self, approval_id: UUID, *, by: Principal | str, args_digest: str | None = None
    ) -> ApprovalRecord:
        """Ask for fresh arguments for a pending action whose capability can make them (its
        ``regenerate``: a new quote for a swap). The approval ends ``superseded`` (it can never
        be approved); ``resume(run_id)`` makes the fresh call wait for a new approval, which
        names this one (``pending_action.regenerated_from``). ``ApprovalError`` as ``approve``
        (who may, decided, expired, ``args_digest``), and ``not_regenerable``."""
        return await _decisions.regenerate(
            self._parts.deciding, approval_id, by=by, args_digest=args_digest
        )

    async def submit_result(
        self, approval_id: UUID, result: Any, *, by: Principal | str | None = None
    ) -> ApprovalRecord:
        """Report the result of a client-executed action (the client performed it)."""
        return await _decisions.submit_result(self._parts.deciding, approval_id, result, by=by)


class Agent(_Decisions):
    """An agent: a model, its capabilities, the gates they pass, and the store runs live in.

    ``authorize`` is required for propose / approve / execute capabilities: without it those
    calls are refused (fail closed). An async ``authorize`` that has not answered within
    ``authorize_timeout`` seconds (10 by default) refuses the call (``unauthorized``); a
    synchronous one runs on the event loop and must not block. With a ``memory``,
    ``remember_after_run(principal_id)`` runs in the background after each completed run
    (``agent.memory.drain()`` waits for it and for the remembered replies).

    Its options are frozen (``agent.options``, an ``AgentOptions``; each also read as an
    attribute: ``agent.policy``); ``agent.with_options(**changes)`` returns another agent.
    """

    __slots__ = ()

    def __init__(
        self,
        *,
        model: Model,
        capabilities: Iterable[Capability],
        store: Store | None = None,
        policy: Policy | None = None,
        guards: Sequence[Guard] | None = None,
        authorize: Authorize | None = None,
        system: str | Sequence[str] = DEFAULT_SYSTEM,
        max_turns: int = 12,
        max_tool_calls: int = 40,
        clock: Clock | None = None,
        redactor: Redactor | None = None,
        model_settings: Mapping[str, Any] | None = None,
        lease_seconds: float = 30.0,
        model_tier: Tier | None = None,
        thinking_effort: Effort | None = None,
        budget_usd: Decimal | str | None = None,
        prices: PriceTable | None = None,
        authorize_timeout: float = DEFAULT_AUTHORIZE_TIMEOUT,
        context: DomainContext | None = None,
        memory: Memory | None = None,
        remember_replies: bool = False,
        recall_days: int | None = None,
        remember_after_run: Callable[[str], Awaitable[object]] | None = None,
        context_window: int | None = None,
        compact_at: float = 0.85,
        summarizer: Summarizer | None = None,
        microcompact: bool = True,
        skills: Iterable[Skill] = (),
        output_type: Any = None,
        output_retries: int = DEFAULT_OUTPUT_RETRIES,
        deps_type: Any = None,
        deps_factory: DepsFactory | None = None,
        text_guards: Sequence[TextGuard] = (),
        delegates: Mapping[str, Agent] | None = None,
    ) -> None:
        given = {k: v for k, v in locals().items() if k != "self"}  # the keywords, as given
        for name in ("store", "policy", "clock", "redactor", "model_settings"):
            if given[name] is None:  # None: AgentOptions' default (a MemoryStore, ...)
                del given[name]
        options = AgentOptions(**given)  # normalised and checked there
        self._make(options, Shared(), None)

    def _make(self, options: AgentOptions, shared: Shared, previous: Built | None) -> None:
        REDACT_LOGS.register(options.redactor)  # fiduciary's log records get its rules too
        object.__setattr__(self, "_parts", assemble(options, shared, previous))  # (frozen)

    # --- options ---------------------------------------------------------------------------
    def with_options(self, **changes: Any) -> Agent:
        """Another agent: this one's options with ``changes`` (the constructor's keywords, and
        ``signatures``, ``tracer``), sharing the rest — the store, the clock, the gates when
        nothing they are made of changed — and, in this process, the lease owner it drives runs
        as and the principals' write locks."""
        options = replaced(self._parts.built.options, changes)
        agent = object.__new__(Agent)
        agent._make(options, self._parts.shared, self._parts.built)
        return agent

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise _frozen(name)

    def __delattr__(self, name: str) -> NoReturn:
        raise _frozen(name)

    # --- runs ------------------------------------------------------------------------------
    def run(
        self,
        message: str,
        *,
        principal: Principal | str,
        run_id: UUID | None = None,
        capabilities: Iterable[str] | None = None,
        plan_first: bool = False,
        skill: str | None = None,
        origin: Origin | None = None,
        output_type: Any = None,
        output_retries: int | None = None,
        deps: Any = None,
        delegation: Delegation | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Start a run (or continue the conversation of an idle one) and stream its events.

        ``output_type`` (the agent's by default) and ``output_retries``: the type a new run's
        answer must be (fiduciary.outputs); ``deps``: what its capabilities get as
        ``ctx.deps``, never recorded (fiduciary.deps).

        ``origin``: the outside event this message comes from (an attention decision, a
        webhook, an app's tick, a chat that is not the principal's), recorded with it; a write
        proposed in answer to it waits for a person unless its autonomous budget allows it.
        None (the default): the principal in person.

        The run is recorded durably before the first event is yielded. The stream ends when the
        run completes, fails, or waits for a person (status ``awaiting_approval``). If the store
        fails meanwhile, the stream raises ``StoreError`` once the run's lease is released:
        every event yielded is committed, and the run can be resumed (a sweep does it).
        """
        runs = self._parts.runs
        events = runs.stream(
            partial(
                runs.open,
                message,
                principal,
                run_id,
                capabilities,
                plan_first,
                skill,
                origin,
                output_type=output_type,
                output_retries=output_retries,
                deps=deps,
                delegation=delegation,
            )
        )
        return _delegated.followed(self, run_id, events, _delegated.rerun(runs, delegation))

    def resume(
        self,
        run_id: UUID,
        *,
        claimed: RunRecord | None = None,
        any_model: bool = False,
        deps: Any = None,
    ) -> AsyncGenerator[Event, None]:
        """Continue a run from its log: after a crash, or once its approvals are decided.

        Yields the new events only. A run that is idle, or still waiting for a decision, yields
        nothing new beyond what settling it requires. ``claimed``: the run as leased to this
        agent already (by ``claim_runnable``, in a worker); it is driven under that lease and
        epoch instead of leasing it again (and released if this agent may not drive it).
        Raises ``RunError("agent_mismatch")``, touching nothing, when this agent lacks one of the
        run's capabilities or has another model than the run recorded (unless ``any_model``):
        see ``check_resumable``. Raises ``StoreError`` if the store fails, as ``run``.
        ``deps``: the run's deps (fiduciary.deps), when it needs some; by default those given
        to this agent for the run in this process, else its ``deps_factory``'s.
        A delegated run is driven with the agent its parent's table names, then its waiting
        parent (``awaiting_child``) resumed with its answer (fiduciary.delegation).
        """
        plain = _delegated.plain(self._parts.runs, any_model, deps)
        return _delegated.resume(self, run_id, plain, claimed=claimed, any_model=any_model)

    async def submit(
        self,
        message: str,
        *,
        principal: Principal | str,
        run_id: UUID | None = None,
        capabilities: Iterable[str] | None = None,
        plan_first: bool = False,
        skill: str | None = None,
        origin: Origin | None = None,
        delegation: Delegation | None = None,
    ) -> RunRecord:
        """Record a run's message for workers to drive (``fiduciary.worker``), not driving it here.

        A new run is committed (``run_started`` + ``user_message``) as ``run`` commits it, but
        with no lease: one insert, claimable once committed (PostgreSQL notifies the workers).
        An idle run given as ``run_id`` is leased, gets the ``user_message`` that continues it
        (with the same checks as ``run``: ``forbidden``, ``state``, ``busy``) and is released.
        Returns the run as recorded; its ``last_seq`` is the ``user_message``'s seq.
        ``delegation``: a new run a delegate call records (fiduciary.delegation).
        """
        submit = partial(self._parts.runs.submit, delegation=delegation)
        return await submit(message, principal, run_id, capabilities, plan_first, skill, origin)

    async def cancel(
        self,
        run_id: UUID,
        *,
        by: Principal | str,
        reason: str = "",
        wait_seconds: float | None = None,
        claimed: RunRecord | None = None,
    ) -> RunRecord:
        """Stop a run for good: it ends ``cancelled`` and nothing more of it executes.

        Stop your own drive of the run first (``aclose`` its stream, or cancel the task that
        consumes it). Under the principal's lock and the run's lease, a partial model turn is
        retracted and every call left open is closed: a pending approval is denied; a write
        already in the ledger ends with its recorded outcome (``recovery: ledger`` or
        ``unknown``); a client's reported result is recorded; anything else is refused
        (``cancelled``) and never runs. Then ``run_failed`` with reason ``aborted``, status
        ``cancelled``. A new message continues it like a failed run. The runs its open
        ``delegate`` calls started are cancelled too (fiduciary.delegation).

        When another process holds the lease: on a store that carries cancel requests
        (PostgreSQL) a request is sent to it (again every second) — the worker or server
        driving the run takes it over from its own drive and cancels it — and this waits for
        the run to end; if the holder died, its lease lapses meanwhile and the run is cancelled
        here. Everything, the principal's lock included, is bounded by ``wait_seconds`` (by
        default ``lease_seconds`` + 1; an attempt here always has a second for its own round
        trips, and no request is sent once the wait is over); then, or at once on other
        stores, ``RunError("busy")``.
        ``claimed``: the run as leased to this agent already (a worker taking it over from its
        own drive); it is cancelled under that lease.

        Raises ``RunError``: ``not_found``, ``forbidden`` (not the run's principal nor
        ``admin``), ``state`` (already completed, failed or cancelled), ``busy``.
        """
        here = partial(_cancelling.cancel, self._parts.cancelling, run_id, by=by, reason=reason)
        here = partial(here, wait_seconds=wait_seconds, claimed=claimed)
        return await _delegated.cancel(self, run_id, here, by=by)

    def taken_over(self, run_id: UUID) -> AbstractAsyncContextManager[RunRecord | None]:
        """Take a run over from a drive of this agent: a new epoch under its name, so the run
        is never unleased (no other process claims it) and that drive can write nothing more.
        The lease is kept renewed while the block runs (the drive stopping, the principal's
        lock awaited) and released if the block fails; what the block does with it stands
        otherwise (``cancel(claimed=...)`` releases it). Yields None, leasing nothing, if
        another process holds the run."""
        return _cancelling.taken_over(self._parts.cancelling, run_id)

    async def resume_all(self) -> list[UUID]:
        """Resume, once, every run that can make progress and that nobody drives (left
        ``running`` by a dead process, or suspended with a decision or an expired approval);
        returns the ids of those driven to their next stop (``[]``: nothing to do). A run this
        agent may not drive (``check_resumable``) or that another process drives is left as it
        is. Raises ``StoreUnavailableError`` when the store failed — listing the runs, or for
        some of them (its ``failed``; the others were driven, its ``resumed``): those are left
        for a later attempt. To keep doing it, use ``keep_runs_moving``."""
        store, clock = self.store, self._parts.built.options.clock
        return await resume_once(
            lambda: _delegated.runs_to_resume(store, clock),
            partial(self._parts.runs.resume_quietly, self.resume, reraise=True),
        )

    def leaves_alone(self, run_id: UUID) -> bool:
        """Whether this agent refused to drive the run (another agent's: ``check_resumable``);
        the sweeps skip it, so it is neither tried nor logged again and again."""
        return run_id in self._parts.runs.mismatched

    async def check_resumable(self, run_id: UUID, *, any_model: bool = False) -> None:
        """Refuse, with ``RunError("agent_mismatch")``, a run this agent is not the one for.

        ``run_started`` records the capabilities a run may call and its model's name. An agent
        that lacks one of those capabilities must neither drive the run nor decide its
        approvals; one with another model must not drive it unless ``any_model`` says so.
        """
        await self._parts.runs.check_resumable(run_id, any_model=any_model)

    async def keep_runs_moving(self, *, every: float = SWEEP_SECONDS) -> None:
        """Resume every run that can make progress and that nobody drives, now and every
        ``every`` seconds, until cancelled (then the drives started here stop, releasing their
        leases). Run it as a task beside an application that embeds the agent: a run whose
        process died, or whose approval was decided in another process, is then driven again
        within its lease time (``lease_seconds``) plus ``every``. ``fiduciary serve`` and
        ``fiduciary worker`` do this themselves. Runs this agent drives elsewhere hold live
        leases and are never taken."""
        if every <= 0:
            raise ConfigurationError("every must be positive")
        store, clock = self.store, self._parts.built.options.clock
        await keep_moving(
            lambda: _delegated.runs_to_resume(store, clock),
            partial(self._parts.runs.resume_quietly, self.resume, reraise=False),
            self.leaves_alone,
            every=every,
        )

    # --- reading ---------------------------------------------------------------------------
    async def get_run(self, run_id: UUID) -> RunRecord:
        return await existing_run(self.store, run_id)

    async def output(self, run_id: UUID) -> Any:
        """The typed answer of a completed run (its latest completion, as ``run_completed``
        recorded it), a value of its output type; None when it has none (fiduciary.outputs)."""
        return await self.outputs.output_of(self.store, await existing_run(self.store, run_id))

    def events(
        self,
        run_id: UUID,
        after_seq: int = 0,
        *,
        follow: bool = True,
        poll_seconds: float | None = None,
    ) -> AsyncGenerator[Event, None]:
        """The run's events after ``after_seq``: the stored ones, then (``follow``) live ones.

        Live events come from this process's commits at once, and from other processes' commits
        by polling the store every ``poll_seconds`` (0.5 s by default) — or at once, with no
        polling needed, on PostgreSQL (LISTEN/NOTIFY; it re-reads every 30 s by default only as
        a safety net). No event is yielded twice or skipped.
        """
        return run_events(self.store, run_id, after_seq, follow=follow, poll_seconds=poll_seconds)

    async def pending_approvals(
        self, *, principal: Principal | str | None = None, run_id: UUID | None = None
    ) -> list[ApprovalRecord]:
        who = None if principal is None else principal_of(principal).actor_id
        return await self.store.list_approvals(principal=who, run_id=run_id, status="pending")

    async def answer(
        self, question_id: UUID, answer: str, *, by: Principal | str
    ) -> ApprovalRecord:
        """Answer a question the model asked the person (``fiduciary.questions``): recorded
        durably; the run continues with ``resume(run_id)``, here or in any other process."""
        return await _questions.answer_question(self._parts.deciding, question_id, answer, by=by)

    async def questions(
        self, *, principal: Principal | str | None = None, run_id: UUID | None = None
    ) -> list[_questions.PendingQuestion]:
        """The unanswered questions of a principal (or of a run), oldest first."""
        who = None if principal is None else principal_of(principal).actor_id
        return await _questions.list_questions(self.store, principal=who, run_id=run_id)

    def principal_lock(self, actor_id: str) -> AbstractAsyncContextManager[Held]:
        """Writes of one principal run one at a time: in this process, and across processes
        when the store's locks span them (``PrincipalLocking``: PostgreSQL)."""
        return self._parts.built.runtime.principal_lock(actor_id)

    async def list_runs(
        self,
        *,
        principal: Principal | str | None = None,
        status: RunStatus | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        who = None if principal is None else principal_of(principal).actor_id
        return await self.store.list_runs(principal=who, status=status, limit=limit)

    async def list_approvals(
        self,
        *,
        principal: Principal | str | None = None,
        status: ApprovalStatus | None = "pending",
    ) -> list[ApprovalRecord]:
        who = None if principal is None else principal_of(principal).actor_id
        return await self.store.list_approvals(principal=who, status=status)
