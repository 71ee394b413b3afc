"""Private: a run's drives as an agent starts and continues them (``Agent.run``, ``resume``,
``submit``, ``resume_all``, ``keep_runs_moving``).

``Runs`` opens a drive — a new run recorded by the drive's first commit, an idle run leased to
add a message to it, a suspended or abandoned run leased to resume it — and streams its
committed events. It is given the agent's frozen options and what is built of them once (the
gates, the skills, the ``Runtime``), and what agents derived with ``with_options`` share in a
process (``Shared``: the lease owner, the principals' locks, the folds kept between messages).
"""

from __future__ import annotations

import asyncio
import os
import socket
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

from .._logs import logger
from .._loop import DONE, Driver, Runtime, Transcript
from .._loop.folds import KeptFolds
from .._loop.relay import Relay
from ..capabilities import Kind, Principal, principal_of
from ..context.skills import Skill, chosen_skill
from ..delegation import Delegation, resumed_by_parent
from ..deps import Dependencies, started_fields, typed_drive
from ..events import Event, Origin, RunStarted, UserMessage, UserMessageDraft
from ..exceptions import RunError, StoreError
from ..gates import PLAN_FIRST_KINDS, Gates
from ..models.base import UserTextMessage
from ..models.tiers import TurnPlan, plan_turn
from ..outputs import OutputTypes
from ..stores.base import IDLE, RunRecord, RunStatus, existing_run
from .options import AgentOptions

__all__ = ["Runs", "Shared"]

log = logger("fiduciary.agent")

_REPLAY_ONLY = (
    "run {run_id} is a replay: only a replay agent drives it (its writes never execute); "
    "replay the original run again instead"
)
_SUSPENDED: frozenset[RunStatus] = frozenset(
    {"awaiting_approval", "awaiting_client_result", "awaiting_input"}
)
_ALL_KINDS = tuple(sorted(k.value for k in Kind))  # what a run may call, as run_started says
_PLAN_FIRST_KINDS = tuple(sorted(k.value for k in PLAN_FIRST_KINDS))


@dataclass(slots=True)
class Shared:
    """What an agent and the agents derived from it (``with_options``) share in a process: the
    lease owner they drive runs as, the principals' write locks (writes of one principal run
    one at a time), and the transcripts kept for the next message of a conversation."""

    owner: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid4().hex[:8]}"
    )
    locks: weakref.WeakValueDictionary[str, asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary
    )
    folds: KeptFolds = field(default_factory=KeptFolds)


class Runs:
    """Opening the drives of an agent's runs, and streaming their events."""

    def __init__(
        self,
        options: AgentOptions,
        *,
        gates: Gates,
        skills: Mapping[str, Skill],
        runtime: Runtime,
        shared: Shared,
        outputs: OutputTypes,
        deps: Dependencies,
    ) -> None:
        self.options = options
        self.gates = gates
        self.skills = skills
        self.runtime = runtime
        self.shared = shared
        self.outputs = outputs
        self.deps = deps
        self.store = options.store
        self.mismatched: set[UUID] = set()  # runs this agent refused to drive (logged once)

    def driver(self, run: RunRecord, transcript: Transcript) -> Driver:
        return Driver(self.runtime, run, transcript)

    # --- run and submit --------------------------------------------------------------------
    def asked(
        self, message: str, principal: Principal | str, skill: str | None
    ) -> tuple[Principal, str | None]:
        """Who asks, and the skill they chose; refused (``invalid``) unless the message is text."""
        who, skill = principal_of(principal), chosen_skill(self.skills, skill)
        if not isinstance(message, str) or not message.strip():
            raise RunError("invalid", "a message must be non-empty text")
        return who, skill

    async def open(
        self,
        message: str,
        principal: Principal | str,
        run_id: UUID | None,
        capabilities: Iterable[str] | None,
        plan_first: bool,
        skill: str | None,
        origin: Origin | None = None,
        *,
        output_type: Any = None,
        output_retries: int | None = None,
        deps: Any = None,
        delegation: Delegation | None = None,
    ) -> tuple[Driver, list[Event]]:
        """``run`` up to its drive: the run leased (a new one is recorded by the drive's first
        commit, with its first events), the events to yield before the drive's."""
        who, skill = self.asked(message, principal, skill)
        existing = await self.store.get_run(run_id) if run_id is not None else None
        if existing is None:  # created by the drive's first commit, with its first events
            run_id = run_id or uuid4()
            spec = self.outputs.for_new(output_type, output_retries)
            deps = await self.deps.for_new(run_id, who.actor_id, deps)
            run, transcript, first, plan = await self.create(
                *(message, who, run_id, capabilities, plan_first, skill, origin),
                record=False,
                started=started_fields(self.outputs, self.deps, spec, deps),
                delegation=delegation,
            )
            driver = Driver(self.runtime, run, transcript, unrecorded=first, output=spec, deps=deps)
            if transcript.user_text == message:  # the first turn's plan is the run_started's
                driver.plan = plan
            return driver, []
        run, transcript = await self.continued(existing, who)
        spec, deps = await typed_drive(
            self.outputs, self.deps, self.store, run, transcript.started, output_type, deps
        )
        driver = Driver(self.runtime, run, transcript, output=spec, deps=deps)
        return driver, await self.emit_first(driver, message, skill, origin)

    async def create(
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
        started: Mapping[str, Any] | None = None,
        delegation: Delegation | None = None,
    ) -> tuple[RunRecord, Transcript, list[Event], TurnPlan]:
        """A new run (leased by this process unless ``leased`` is false), recorded unless
        ``record`` is false; and the plan its ``run_started`` records."""
        o = self.options
        names, text = self.gates.names, o.redactor.redact_text(message)
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
            settings=o.model_settings,
            tier=o.model_tier,
            effort=o.thinking_effort,
        )
        now = o.clock.now()
        rid = run_id or uuid4()
        run = RunRecord(
            run_id=rid,
            principal=who.actor_id,
            status="running",
            created_at=now,
            updated_at=now,
            epoch=1,
            lease_owner=self.shared.owner if leased else None,
            lease_until=now + timedelta(seconds=o.lease_seconds) if leased else None,
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
                model=o.model.name,
                allowed_kinds=kinds,
                tier=plan.tier,
                effort=plan.effort,
                origin=origin,
                **(started or {}),
                **(delegation.recorded() if delegation is not None else {}),
            ),
            UserMessage(run_id=rid, seq=2, at=now, text=text, skill=skill, origin=origin),
        ]
        if record:
            await self.store.create_run(run, first)
        transcript = Transcript()
        for event in first:
            transcript.apply(event)
        return run.with_(last_seq=2), transcript, first, plan

    async def continued(self, existing: RunRecord, who: Principal) -> tuple[RunRecord, Transcript]:
        """Lease an idle run to add a message to it (``run`` and ``submit``)."""
        if existing.principal != who.actor_id:
            raise RunError("forbidden", "this run belongs to another principal")
        if existing.status == "awaiting_child":
            raise RunError("state", "the run is waiting for the run it delegated to; wait for it")
        if existing.status in _SUSPENDED:
            raise RunError("state", "the run is waiting for a decision; approve or deny it first")
        if existing.status not in IDLE:
            raise RunError("busy", "the run is still running")
        run, transcript = await self.lease(existing.run_id)
        started = transcript.started
        if (
            started is not None
            and started.replay_of is not None
            and not self.options.drives_replays
        ):
            await self.store.release(run.run_id, epoch=run.epoch)
            raise RunError("state", _REPLAY_ONLY.format(run_id=run.run_id))
        if run.status not in IDLE:  # someone else continued it between our read and lease
            await self.store.release(run.run_id, epoch=run.epoch)
            raise RunError("busy", "the run is still running")
        return run, transcript

    async def emit_first(
        self, driver: Driver, message: str, skill: str | None, origin: Origin | None
    ) -> list[Event]:
        """The ``user_message`` that continues an idle run, committed."""
        try:
            text = self.options.redactor.redact_text(message)
            draft = UserMessageDraft(text=text, skill=skill, origin=origin)
            built = driver.emit(draft, status="running")
            await driver.barrier()
            return built
        except BaseException:
            with suppress(Exception):
                await self.store.release(driver.run_id, epoch=driver.epoch)
            raise

    async def submit(
        self,
        message: str,
        principal: Principal | str,
        run_id: UUID | None,
        capabilities: Iterable[str] | None,
        plan_first: bool,
        skill: str | None,
        origin: Origin | None,
        *,
        delegation: Delegation | None = None,
    ) -> RunRecord:
        """``Agent.submit``: the message recorded, for workers to drive."""
        who, skill = self.asked(message, principal, skill)
        existing = await self.store.get_run(run_id) if run_id is not None else None
        if existing is None:  # one insert, never leased: claimable once committed
            spec = self.outputs.for_new(None, None)  # a worker drives it: the agent's own
            run, _, _, _ = await self.create(
                *(message, who, run_id, capabilities, plan_first, skill, origin),
                leased=False,
                started=started_fields(self.outputs, self.deps, spec, None),
                delegation=delegation,
            )
            return run
        run, transcript = await self.continued(existing, who)
        driver = Driver(self.runtime, run, transcript)
        first = await self.emit_first(driver, message, skill, origin)
        await self.store.release(run.run_id, epoch=run.epoch)
        return run.with_(
            status="running", last_seq=first[-1].seq, lease_owner=None, lease_until=None
        )

    # --- resume ----------------------------------------------------------------------------
    async def reopen(
        self, run_id: UUID, claimed: RunRecord | None, any_model: bool, deps: Any = None
    ) -> tuple[Driver, list[Event]] | None:
        """``resume`` up to its drive; None when there is nothing to drive."""
        self.deps.given(run_id, deps)
        if claimed is None:
            existing = await existing_run(self.store, run_id)
            if existing.status in IDLE:
                return None
            await self.drivable(run_id, any_model=any_model)
            run, transcript = await self.lease(run_id)
        else:
            if claimed.run_id != run_id or claimed.lease_owner != self.shared.owner:
                raise RunError("busy", f"run {run_id} is not leased to this agent")
            try:
                await self.drivable(run_id, any_model=any_model)
            except BaseException:
                with suppress(Exception):  # left for an agent that may drive it
                    await self.store.release(run_id, epoch=claimed.epoch)
                raise
            run, transcript = claimed, await self.replay(claimed)
        if run.status in IDLE:  # finished by another holder between our read and our lease
            await self.store.release(run_id, epoch=run.epoch)
            return None
        spec, deps = await typed_drive(self.outputs, self.deps, self.store, run, transcript.started)
        return Driver(self.runtime, run, transcript, output=spec, deps=deps), []

    async def drivable(self, run_id: UUID, *, any_model: bool) -> None:
        """``check_resumable``; a refused run is remembered and logged, once."""
        try:
            await self.check_resumable(run_id, any_model=any_model)
        except RunError as exc:
            if exc.code == "agent_mismatch" and run_id not in self.mismatched:
                self.mismatched.add(run_id)
                log.warning("run %s is left for another agent: %s", run_id, exc.message)
            raise

    async def check_resumable(self, run_id: UUID, *, any_model: bool = False) -> None:
        """``Agent.check_resumable``."""
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
        if started.replay_of is not None and not self.options.drives_replays:
            raise RunError("agent_mismatch", _REPLAY_ONLY.format(run_id=run_id))
        if started.parent_run_id is not None and not resumed_by_parent(run_id):
            raise RunError(
                "agent_mismatch",
                f"run {run_id} was delegated by run {started.parent_run_id}: its parent's "
                "delegate call resumes it, with the agent it delegated to",
            )
        model = self.options.model.name
        if not any_model and started.model != model:
            raise RunError(
                "agent_mismatch",
                f"run {run_id} was started with the model {started.model}, and this agent's is "
                f"{model}",
            )
        why = self.outputs.refusal(started) or self.deps.refusal(started, run_id)
        if why is not None:  # its answers' type, or its deps: this agent cannot give them
            raise RunError("agent_mismatch", f"run {run_id} {why}")

    async def resume_quietly(
        self, resume: Callable[[UUID], AsyncGenerator[Event, None]], run_id: UUID, *, reraise: bool
    ) -> bool:
        """Drive the run to its next stop; False if it could not be (busy, or the store
        failed: logged, and left for a later sweep; raised too with ``reraise``)."""
        try:
            async for _ in resume(run_id):
                pass
        except RunError:
            return False
        except StoreError as exc:
            log.warning("run %s could not be resumed (%s); it will be tried again", run_id, exc)
            if reraise:
                raise
            return False
        return True

    # --- leases ----------------------------------------------------------------------------
    async def lease(self, run_id: UUID) -> tuple[RunRecord, Transcript]:
        o = self.options
        run = await self.store.acquire(
            run_id, owner=self.shared.owner, now=o.clock.now(), ttl_seconds=o.lease_seconds
        )
        if run is None:
            raise RunError("busy", f"run {run_id} is being driven by another worker")
        try:
            # the fold this process left at its last lease, when no one has leased it since
            kept = await self.shared.folds.take(self.store, run)
        except BaseException:
            with suppress(Exception):
                await self.store.release(run.run_id, epoch=run.epoch)
            raise
        return run, kept if kept is not None else await self.replay(run)

    async def replay(self, run: RunRecord) -> Transcript:
        """The transcript of a leased run, from its log (the lease is released on failure)."""
        try:
            events = await self.store.read_events(run.run_id)
        except BaseException:
            with suppress(Exception):
                await self.store.release(run.run_id, epoch=run.epoch)
            raise
        transcript = Transcript()
        for event in events:
            transcript.apply(event)
        return transcript

    # --- the stream ------------------------------------------------------------------------
    async def stream(
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
            if driver.settled:  # kept for the run's next lease (a few runs at most)
                self.shared.folds.keep(driver.run_id, driver.epoch, driver.t)
        finally:
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
