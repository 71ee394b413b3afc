"""``Agent``: the configuration of an agent and its run / resume / approve API.

An agent is stateless between calls: a run lives in the store, so any process with the same
store can continue it, decide its approvals or follow its events.
"""

from __future__ import annotations

import asyncio
import operator
import os
import socket
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from datetime import timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID, uuid4

from . import _cancelling, _decisions
from ._following import run_events
from ._logs import REDACT_LOGS, logger
from ._loop import DONE, Driver, Held, Limits, Runtime, Transcript
from ._loop.folds import KeptFolds
from ._loop.relay import Relay
from ._sweep import SWEEP_SECONDS, keep_moving, resume_once
from .capabilities import Capability, Kind, Principal, principal_of
from .clock import Clock, SystemClock
from .context.compaction import Summarizer
from .context.config import ContextConfig, DomainContext, context_config
from .context.recall import MemoryLayer
from .context.skills import Skill, chosen_skill, skill_table, with_skills
from .delegation import Delegation, resumed_by_parent, with_delegates
from .events import Event, Origin, RunStarted, UserMessage, UserMessageDraft
from .exceptions import ConfigurationError, RunError, StoreError
from .gates import DEFAULT_AUTHORIZE_TIMEOUT, PLAN_FIRST_KINDS, Authorize, Gates
from .guards import Guard, default_guards
from .models.base import Model, UserTextMessage
from .models.pricing import PriceTable, parse_budget
from .models.tiers import Effort, Tier, TurnPlan, plan_turn
from .policy import Policy
from .redaction import Redactor
from .signed_approvals import SignatureCheck
from .stores.base import (
    IDLE,
    ApprovalRecord,
    ApprovalStatus,
    PrincipalLocking,
    RunRecord,
    RunStatus,
    Store,
    existing_run,
)
from .stores.memory import MemoryStore
from .tracing import NO_TRACER, RunTracer

if TYPE_CHECKING:
    from .context.memory import Memory

__all__ = ["DEFAULT_SYSTEM", "Agent"]

log = logger("fiduciary.agent")

DEFAULT_SYSTEM = (
    "You act on behalf of a person through the tools you are given, and only through them. "
    "Read before you write. Never claim an action happened unless a tool result says so. "
    "When a tool reports an error, a refusal or an unknown outcome, tell the person plainly."
)

_REPLAY_ONLY = (
    "run {run_id} is a replay: only a replay agent drives it (its writes never execute); "
    "replay the original run again instead"
)
_SUSPENDED: frozenset[RunStatus] = frozenset({"awaiting_approval", "awaiting_client_result"})
_ALL_KINDS = tuple(sorted(k.value for k in Kind))  # what a run may call, as run_started says
_PLAN_FIRST_KINDS = tuple(sorted(k.value for k in PLAN_FIRST_KINDS))


class Agent:
    """An agent: a model, its capabilities, the gates they pass, and the store runs live in.

    ``authorize`` is required for propose / approve / execute capabilities: without it those
    calls are refused (fail closed). An async ``authorize`` that has not answered within
    ``authorize_timeout`` seconds (10 by default) refuses the call (``unauthorized``); a
    synchronous one runs on the event loop and must not block. ``delegates``: the agents this
    one may hand a task to, by name (the ``delegate`` capability, fiduciary.delegation; the
    mapping is read at each call). With a ``memory``,
    ``remember_after_run(principal_id)`` runs in the background after each completed run
    (``agent.memory.drain()`` waits for it and for the remembered replies).
    """

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
        delegates: Mapping[str, Agent] | None = None,
    ) -> None:
        if max_turns < 1 or max_tool_calls < 1:
            raise ConfigurationError("max_turns and max_tool_calls must be at least 1")
        if not authorize_timeout > 0:
            raise ConfigurationError("authorize_timeout must be a positive number of seconds")
        self.model = model
        # tier and effort are chosen per turn (models/tiers.py) unless fixed here
        self.model_tier: Tier | None = model_tier
        self.thinking_effort: Effort | None = thinking_effort
        self.budget_usd = parse_budget(budget_usd)
        self.prices = prices
        self.store: Store = store if store is not None else MemoryStore()
        self.policy = policy or Policy()
        # verifies passkey-signed approvals (fiduciary.passkeys); None: nothing can be signed
        self.signatures: SignatureCheck | None = None
        self.clock: Clock = clock or SystemClock()
        self.redactor = redactor or Redactor()
        REDACT_LOGS.register(self.redactor)  # fiduciary's log records get its rules too
        self.system: tuple[str, ...] = (system,) if isinstance(system, str) else tuple(system)
        self.max_turns = max_turns
        self.max_tool_calls = max_tool_calls
        self.model_settings: dict[str, Any] = dict(model_settings or {})
        self.lease_seconds = lease_seconds
        # spans and metrics of each drive: none unless an entry point or instrument() sets one
        self.tracer: RunTracer = NO_TRACER
        self.skills = skill_table(skills)  # playbooks: use_skill, and the prompt's skill layer
        self.gates = Gates(
            with_skills(with_delegates(capabilities, self, delegates), self.skills),
            store=self.store,
            policy=self.policy,
            guards=default_guards() if guards is None else list(guards),
            authorize=authorize,
            clock=self.clock,
            redactor=self.redactor,
            authorize_timeout=authorize_timeout,
        )
        # what the model is sent beyond the log (fiduciary.context): layers, compaction, memory
        self.context = context
        self.memory = (
            None
            if memory is None
            else MemoryLayer(
                memory, self.redactor.redact_text, recall_days=recall_days, clock=self.clock
            )
        )
        self.remember_replies = remember_replies
        if remember_after_run is not None and self.memory is None:
            raise ConfigurationError("remember_after_run needs a memory (memory=...)")
        self.remember_after_run = remember_after_run
        self.context_window = context_window
        self.compact_at = compact_at
        self.summarizer = summarizer
        self.microcompact = microcompact
        self._context_config()  # options are checked now, not at the first run
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._locking: tuple[Store | None, bool] = (None, False)  # a store, PrincipalLocking?
        self._mismatched: set[UUID] = set()  # runs this agent refused to drive (logged once each)
        # runs marked as replays are driven only by a replay agent (fiduciary.observability),
        # whose writes never execute: never by this agent's real handlers
        self.drives_replays = False
        self._folds = KeptFolds()  # transcripts kept for the next message of a conversation
        self._built: tuple[tuple[object, ...], Runtime] | None = None  # _runtime's last

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
        delegation: Delegation | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Start a run (or continue the conversation of an idle one) and stream its events.

        ``origin``: the outside event this message comes from (an attention decision, a
        webhook, an app's tick, a chat that is not the principal's), recorded with it; a write
        proposed in answer to it waits for a person unless its autonomous budget allows it.
        None (the default): the principal in person.

        The run is recorded durably before the first event is yielded. The stream ends when the
        run completes, fails, or waits for a person (status ``awaiting_approval``). If the store
        fails meanwhile, the stream raises ``StoreError`` once the run's lease is released:
        every event yielded is committed, and the run can be resumed (a sweep does it).
        """
        return self._stream(
            partial(
                self._open,
                *(message, principal, run_id, capabilities, plan_first, skill, origin),
                delegation=delegation,
            )
        )

    async def _open(
        self,
        message: str,
        principal: Principal | str,
        run_id: UUID | None,
        capabilities: Iterable[str] | None,
        plan_first: bool,
        skill: str | None,
        origin: Origin | None = None,
        *,
        delegation: Delegation | None = None,
    ) -> tuple[Driver, list[Event]]:
        """``run`` up to its drive: the run leased (a new one is recorded by the drive's first
        commit, with its first events), the events to yield before the drive's."""
        who, skill = principal_of(principal), chosen_skill(self.skills, skill)
        if not isinstance(message, str) or not message.strip():
            raise RunError("invalid", "a message must be non-empty text")
        existing = await self.store.get_run(run_id) if run_id is not None else None
        if existing is None:  # created by the drive's first commit, with its first events
            run, transcript, first, plan = await self._create(
                *(message, who, run_id, capabilities, plan_first, skill, origin),
                record=False,
                delegation=delegation,
            )
            driver = Driver(self._runtime(), run, transcript, unrecorded=first)
            if transcript.user_text == message:  # the first turn's plan is the run_started's
                driver.plan = plan
            return driver, []
        run, transcript = await self._continue(existing, who)
        driver = Driver(self._runtime(), run, transcript)
        return driver, await self._emit_first(driver, message, skill, origin)

    async def _create(
        self,
        message: str,
        who: Principal,
        run_id: UUID | None,
        capabilities: Iterable[str] | None,
        plan_first: bool,
        skill: str | None = None,
        origin: Origin | None = None,
        *,
        leased: bool = True,
        record: bool = True,
        delegation: Delegation | None = None,
    ) -> tuple[RunRecord, Transcript, list[Event], TurnPlan]:
        """A new run (leased by this process unless ``leased`` is false), recorded unless
        ``record`` is false; and the plan its ``run_started`` records."""
        names, text = self.gates.names, self.redactor.redact_text(message)
        if capabilities is not None:
            wanted = list(dict.fromkeys(capabilities))
            unknown = [n for n in wanted if self.gates.get(n) is None]
            if unknown:
                raise RunError("invalid", f"unknown capabilities: {', '.join(unknown)}")
            names = wanted
        kinds = list(_PLAN_FIRST_KINDS if plan_first else _ALL_KINDS)
        plan = plan_turn(
            [c for n in names if (c := self.gates.get(n)) is not None],
            [UserTextMessage(message)],
            allowed_kinds=kinds,
            settings=self.model_settings,
            tier=self.model_tier,
            effort=self.thinking_effort,
        )
        now = self.clock.now()
        rid = run_id or uuid4()
        run = RunRecord(
            run_id=rid,
            principal=who.actor_id,
            status="running",
            created_at=now,
            updated_at=now,
            epoch=1,
            lease_owner=self.owner if leased else None,
            lease_until=now + timedelta(seconds=self.lease_seconds) if leased else None,
            title=text[:120],
            scopes=tuple(sorted(who.scopes)),
        )
        first: list[Event] = [
            RunStarted(
                run_id=rid,
                seq=1,
                at=now,
                principal=who.actor_id,
                capabilities=names,
                model=self.model.name,
                allowed_kinds=kinds,
                tier=plan.tier,
                effort=plan.effort,
                origin=origin,
                **(delegation.recorded() if delegation is not None else {}),
            ),
            UserMessage(run_id=rid, seq=2, at=now, text=text, skill=skill, origin=origin),
        ]
        if record:
            await self.store.create_run(run, first)
        transcript = self._transcript()
        for event in first:
            transcript.apply(event)
        return run.with_(last_seq=2), transcript, first, plan

    async def _continue(self, existing: RunRecord, who: Principal) -> tuple[RunRecord, Transcript]:
        """Lease an idle run to add a message to it (``run`` and ``submit``)."""
        if existing.principal != who.actor_id:
            raise RunError("forbidden", "this run belongs to another principal")
        if existing.status in _SUSPENDED:
            raise RunError("state", "the run is waiting for a decision; approve or deny it first")
        if existing.status not in IDLE:
            raise RunError("busy", "the run is still running")
        run, transcript = await self._lease(existing.run_id)
        started = transcript.started
        if started is not None and started.replay_of is not None and not self.drives_replays:
            await self.store.release(run.run_id, epoch=run.epoch)
            raise RunError("state", _REPLAY_ONLY.format(run_id=run.run_id))
        if run.status not in IDLE:  # someone else continued it between our read and lease
            await self.store.release(run.run_id, epoch=run.epoch)
            raise RunError("busy", "the run is still running")
        return run, transcript

    async def _emit_first(
        self, driver: Driver, message: str, skill: str | None, origin: Origin | None
    ) -> list[Event]:
        """The ``user_message`` that continues an idle run, committed."""
        try:
            text = self.redactor.redact_text(message)
            draft = UserMessageDraft(text=text, skill=skill, origin=origin)
            built = driver.emit(draft, status="running")
            await driver.barrier()
            return built
        except BaseException:
            with suppress(Exception):
                await self.store.release(driver.run_id, epoch=driver.epoch)
            raise

    def resume(
        self, run_id: UUID, *, claimed: RunRecord | None = None, any_model: bool = False
    ) -> AsyncGenerator[Event, None]:
        """Continue a run from its log: after a crash, or once its approvals are decided.

        Yields the new events only. A run that is idle, or still waiting for a decision, yields
        nothing new beyond what settling it requires. ``claimed``: the run as leased to this
        agent already (by ``claim_runnable``, in a worker); it is driven under that lease and
        epoch instead of leasing it again (and released if this agent may not drive it).
        Raises ``RunError("agent_mismatch")``, touching nothing, when this agent lacks one of the
        run's capabilities or has another model than the run recorded (unless ``any_model``):
        see ``check_resumable``. Raises ``StoreError`` if the store fails, as ``run``.
        """
        return self._stream(partial(self._reopen, run_id, claimed, any_model))

    async def _reopen(
        self, run_id: UUID, claimed: RunRecord | None, any_model: bool
    ) -> tuple[Driver, list[Event]] | None:
        """``resume`` up to its drive; None when there is nothing to drive."""
        if claimed is None:
            existing = await existing_run(self.store, run_id)
            if existing.status in IDLE:
                return None
            await self._drivable(run_id, any_model=any_model)
            run, transcript = await self._lease(run_id)
        else:
            if claimed.run_id != run_id or claimed.lease_owner != self.owner:
                raise RunError("busy", f"run {run_id} is not leased to this agent")
            try:
                await self._drivable(run_id, any_model=any_model)
            except BaseException:
                with suppress(Exception):  # left for an agent that may drive it
                    await self.store.release(run_id, epoch=claimed.epoch)
                raise
            run, transcript = claimed, await self._replay(claimed)
        if run.status in IDLE:  # finished by another holder between our read and our lease
            await self.store.release(run_id, epoch=run.epoch)
            return None
        return Driver(self._runtime(), run, transcript), []

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
    ) -> RunRecord:
        """Record a run's message for workers to drive (``fiduciary.worker``), not driving it here.

        A new run is committed (``run_started`` + ``user_message``) as ``run`` commits it, but
        with no lease: one insert, claimable once committed (PostgreSQL notifies the workers).
        An idle run given as ``run_id`` is leased, gets the ``user_message`` that continues it
        (with the same checks as ``run``: ``forbidden``, ``state``, ``busy``) and is released.
        Returns the run as recorded; its ``last_seq`` is the ``user_message``'s seq.
        """
        who, skill = principal_of(principal), chosen_skill(self.skills, skill)
        if not isinstance(message, str) or not message.strip():
            raise RunError("invalid", "a message must be non-empty text")
        existing = await self.store.get_run(run_id) if run_id is not None else None
        if existing is None:  # one insert, never leased: claimable once committed
            run, _, _, _ = await self._create(
                message, who, run_id, capabilities, plan_first, skill, origin, leased=False
            )
            return run
        run, transcript = await self._continue(existing, who)
        driver = Driver(self._runtime(), run, transcript)
        first = await self._emit_first(driver, message, skill, origin)
        await self.store.release(run.run_id, epoch=run.epoch)
        return run.with_(
            status="running", last_seq=first[-1].seq, lease_owner=None, lease_until=None
        )

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
        ``cancelled``. A new message continues it like a failed run.

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
        return await _cancelling.cancel(
            self._cancelling(),
            run_id,
            by=by,
            reason=reason,
            wait_seconds=wait_seconds,
            claimed=claimed,
        )

    def taken_over(self, run_id: UUID) -> AbstractAsyncContextManager[RunRecord | None]:
        """Take a run over from a drive of this agent: a new epoch under its name, so the run
        is never unleased (no other process claims it) and that drive can write nothing more.
        The lease is kept renewed while the block runs (the drive stopping, the principal's
        lock awaited) and released if the block fails; what the block does with it stands
        otherwise (``cancel(claimed=...)`` releases it). Yields None, leasing nothing, if
        another process holds the run."""
        return _cancelling.taken_over(self._cancelling(), run_id)

    def _cancelling(self) -> _cancelling.Cancelling:
        # built per call: the agent's attributes may be replaced after construction
        return _cancelling.Cancelling(
            store=self.store,
            clock=self.clock,
            redactor=self.redactor,
            owner=self.owner,
            lease_seconds=self.lease_seconds,
            principal_lock=self.principal_lock,
            lease=self._lease,
            replay=self._replay,
            driver=lambda run, transcript: Driver(self._runtime(), run, transcript),
        )

    async def resume_all(self) -> list[UUID]:
        """Resume, once, every run that can make progress and that nobody drives (left
        ``running`` by a dead process, or suspended with a decision or an expired approval);
        returns the ids of those driven to their next stop (``[]``: nothing to do). A run this
        agent may not drive (``check_resumable``) or that another process drives is left as it
        is. Raises ``StoreUnavailableError`` when the store failed — listing the runs, or for
        some of them (its ``failed``; the others were driven, its ``resumed``): those are left
        for a later attempt. To keep doing it, use ``keep_runs_moving``."""
        return await resume_once(
            lambda: self.store.runs_to_resume(now=self.clock.now()),
            partial(self._resume_quietly, reraise=True),
        )

    def leaves_alone(self, run_id: UUID) -> bool:
        """Whether this agent refused to drive the run (another agent's: ``check_resumable``);
        the sweeps skip it, so it is neither tried nor logged again and again."""
        return run_id in self._mismatched

    async def _drivable(self, run_id: UUID, *, any_model: bool) -> None:
        """``check_resumable``; a refused run is remembered and logged, once."""
        try:
            await self.check_resumable(run_id, any_model=any_model)
        except RunError as exc:
            if exc.code == "agent_mismatch" and run_id not in self._mismatched:
                self._mismatched.add(run_id)
                log.warning("run %s is left for another agent: %s", run_id, exc.message)
            raise

    async def check_resumable(self, run_id: UUID, *, any_model: bool = False) -> None:
        """Refuse, with ``RunError("agent_mismatch")``, a run this agent is not the one for.

        ``run_started`` records the capabilities a run may call and its model's name. An agent
        that lacks one of those capabilities must neither drive the run nor decide its
        approvals; one with another model must not drive it unless ``any_model`` says so.
        """
        first = await self.store.read_events(run_id, limit=1)
        started = first[0] if first else None
        if not isinstance(started, RunStarted):
            return
        missing = [n for n in started.capabilities if self.gates.get(n) is None]
        if missing:
            raise RunError(
                "agent_mismatch",
                f"run {run_id} was started by an agent with capabilities this agent lacks: "
                f"{', '.join(missing)}",
            )
        if started.replay_of is not None and not self.drives_replays:
            raise RunError("agent_mismatch", _REPLAY_ONLY.format(run_id=run_id))
        if started.parent_run_id is not None and not resumed_by_parent(run_id):
            raise RunError(
                "agent_mismatch",
                f"run {run_id} was delegated by run {started.parent_run_id}: its parent's "
                "delegate call resumes it, with the agent it delegated to",
            )
        if not any_model and started.model != self.model.name:
            raise RunError(
                "agent_mismatch",
                f"run {run_id} was started with the model {started.model}, and this agent's is "
                f"{self.model.name}",
            )

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
        await keep_moving(
            lambda: self.store.runs_to_resume(now=self.clock.now()),
            self._resume_quietly,
            self.leaves_alone,
            every=every,
        )

    async def _resume_quietly(self, run_id: UUID, *, reraise: bool = False) -> bool:
        """Drive the run to its next stop; False if it could not be (busy, or the store
        failed: logged, and left for a later sweep; raised too with ``reraise``)."""
        try:
            async for _ in self.resume(run_id):
                pass
        except RunError:
            return False
        except StoreError as exc:
            log.warning("run %s could not be resumed (%s); it will be tried again", run_id, exc)
            if reraise:
                raise
            return False
        return True

    async def _lease(self, run_id: UUID) -> tuple[RunRecord, Transcript]:
        run = await self.store.acquire(
            run_id, owner=self.owner, now=self.clock.now(), ttl_seconds=self.lease_seconds
        )
        if run is None:
            raise RunError("busy", f"run {run_id} is being driven by another worker")
        try:
            # the fold this process left at its last lease, when no one has leased it since
            kept = await self._folds.take(self.store, run)
        except BaseException:
            with suppress(Exception):
                await self.store.release(run.run_id, epoch=run.epoch)
            raise
        return run, kept if kept is not None else await self._replay(run)

    def _keep_fold(self, driver: Driver) -> None:
        """Keep a settled drive's transcript for the run's next lease (a few runs at most)."""
        self._folds.keep(driver.run_id, driver.epoch, driver.t)

    async def _replay(self, run: RunRecord) -> Transcript:
        """The transcript of a leased run, from its log (the lease is released on failure)."""
        try:
            events = await self.store.read_events(run.run_id)
        except BaseException:
            with suppress(Exception):
                await self.store.release(run.run_id, epoch=run.epoch)
            raise
        transcript = self._transcript()
        for event in events:
            transcript.apply(event)
        return transcript

    def _transcript(self) -> Transcript:
        return Transcript()

    def _runtime(self) -> Runtime:
        """What a drive of a run is given. The agent's attributes may be replaced after its
        construction: it is built again whenever one it is made of is not the same object."""
        parts = (
            *(self.model, self.gates, self.store, self.clock, self.redactor, self.tracer),
            *(self.max_turns, self.max_tool_calls, self.budget_usd, self.lease_seconds),
            *(self.system, self.model_settings, self.model_tier, self.thinking_effort),
            *(self.prices, self.context_window, self.compact_at, self.summarizer, self.context),
            *(self.memory, self.microcompact, self.remember_replies, self.remember_after_run),
        )
        built = self._built
        if built is None or not all(map(operator.is_, parts, built[0])):
            built = self._built = (parts, self._new_runtime())
        return built[1]

    def _new_runtime(self) -> Runtime:
        return Runtime(
            model=self.model,
            gates=self.gates,
            store=self.store,
            clock=self.clock,
            redactor=self.redactor,
            limits=Limits(
                max_turns=self.max_turns,
                max_tool_calls=self.max_tool_calls,
                budget_usd=self.budget_usd,
                lease_seconds=self.lease_seconds,
            ),
            system=self.system,
            model_settings=self.model_settings,
            model_tier=self.model_tier,
            thinking_effort=self.thinking_effort,
            prices=self.prices,
            principal_lock=self.principal_lock,
            context=self._context_config(),
            tracer=self.tracer,
        )

    def _context_config(self) -> ContextConfig:
        return context_config(
            self.model,
            window=self.context_window,
            compact_at=self.compact_at,
            summarizer=self.summarizer,
            domain=self.context,
            memory=self.memory,
            microcompact=self.microcompact,
            remember_replies=self.remember_replies,
            after_run=self.remember_after_run,
            skills=self.skills,
        )

    async def _stream(
        self, opening: Callable[[], Awaitable[tuple[Driver, list[Event]] | None]]
    ) -> AsyncGenerator[Event, None]:
        """The events of ``run`` and ``resume``: their first ones, then each committed event
        of the drive (one generator from the caller to the drive's relay)."""
        opened = await opening()
        if opened is None:
            return
        driver, first = opened
        for event in first:
            yield event
        relay = Relay()
        driver.writer.out = relay
        task = asyncio.create_task(driver.drive())
        items = relay.items
        try:
            while True:
                if not items:
                    await relay.wait()
                item = items.popleft()
                if item is DONE:
                    break
                yield item
            await task
            if driver.settled:
                self._keep_fold(driver)
        finally:
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task

    # --- reading ---------------------------------------------------------------------------
    async def get_run(self, run_id: UUID) -> RunRecord:
        return await existing_run(self.store, run_id)

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

    # --- decisions (_decisions.py) ---------------------------------------------------------
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
            self._deciding(),
            approval_id,
            by=by,
            edits=edits,
            confirm_amount=confirm_amount,
            args_digest=args_digest,
            assertion=assertion,
        )

    async def deny(
        self, approval_id: UUID, *, by: Principal | str, reason: str = ""
    ) -> ApprovalRecord:
        """Decline a pending action: it never executes; the model is told, with the reason."""
        return await _decisions.deny(self._deciding(), approval_id, by=by, reason=reason)

    async def submit_result(
        self, approval_id: UUID, result: Any, *, by: Principal | str | None = None
    ) -> ApprovalRecord:
        """Report the result of a client-executed action (the client performed it)."""
        return await _decisions.submit_result(self._deciding(), approval_id, result, by=by)

    def _deciding(self) -> _decisions.Deciding:
        # built per decision: the agent's attributes may be replaced after construction
        return _decisions.Deciding(
            store=self.store,
            gates=self.gates,
            clock=self.clock,
            redactor=self.redactor,
            transcript=self._transcript,
            signatures=self.signatures,
        )

    def principal_lock(self, actor_id: str) -> AbstractAsyncContextManager[Held]:
        """Writes of one principal run one at a time: in this process, and across processes
        when the store's locks span them (``PrincipalLocking``: PostgreSQL)."""
        lock = self._locks.get(actor_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[actor_id] = lock
        store = self.store
        if store is not self._locking[0]:  # a Protocol check is slow: once per store
            self._locking = (store, isinstance(store, PrincipalLocking))
        locking = cast(PrincipalLocking, store) if self._locking[1] else None
        shared = None if locking is None else locking.principal_lock(actor_id)
        return Held(lock, shared)

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
