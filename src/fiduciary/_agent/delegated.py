"""Private: who drives a delegated run, and how a child's end reaches its waiting parent.

A run whose ``delegate`` call's child has not ended waits ``awaiting_child``, holding no lease
(``fiduciary.delegation``). From there every run that can move is moved without a person:

- **A delegated run is driven with the agent its parent's table names.** ``resume`` of a run
  whose ``run_started`` names a parent finds that agent from this one, the agent of the run a
  person started, down the chain of ``delegates`` tables (``agent_for``); any other agent is
  refused (``agent_mismatch``), so a sweep never drives a child with the wrong model.
- **Whoever drives a child to its end delivers it.** Once a delegated run has ended there, its
  parent, if it waits, is resumed (its delegate call runs again and gets the child's answer:
  one ``tool_call_end``, the parent's log being fenced by its lease), then its grandparent.
- **A drive that leaves its run waiting looks once more** (``followed``), after its lease is
  released: a child that ended meanwhile (its deliverer found the parent leased) makes the run
  continue, in the same stream; a child nobody drives and that can move (its process died, a
  decision to take up) is driven here first. Between the two sides, the child's end is never
  left undelivered: a deliverer that finds the parent leased means the parent's drive has yet
  to release it, and its look comes after.
- **A sweep finds the rest** (``runs_to_resume``): the store's runs, and the runs waiting for a
  child that has ended (a crash between the child's end and its delivery).
- **Cancelling a run cancels the children it waits for** (``cancelled``); a cancelled child is
  an ended one, delivered as any: its parent's call gets a ``cancelled`` result, once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing, suppress
from datetime import datetime
from functools import partial
from typing import Any, Protocol
from uuid import UUID

from .._logs import logger
from ..capabilities import Principal
from ..clock import Clock
from ..delegation import (
    _DELEGATING,
    _RESUMING,
    DELEGATE,
    Delegation,
    child_run_id,
    lineage,
    resumed_by_parent,
)
from ..events import Event, RunStarted, ToolCallEnd, ToolCallRejected, ToolCallStart
from ..exceptions import RunError
from ..stores.base import IDLE, RunRecord, Store
from .runs import Runs

__all__ = [
    "Delegator",
    "again",
    "agent_for",
    "awaited",
    "cancel",
    "deliver",
    "followed",
    "plain",
    "rerun",
    "resume",
    "runs_to_resume",
]

log = logger("fiduciary.delegation")

# how many times one drive looks again at the children its run waits for (each look drives
# a child or the run itself one step further: a bound, never reached in a sane tree)
_LOOKS = 50
_WAITING_LISTED = 200  # waiting runs a sweep checks for an ended child (the newest first)

# a drive of one run as ``Agent.resume`` made it before delegation (run id, claimed lease)
Plain = Callable[[UUID, RunRecord | None], AsyncGenerator[Event, None]]
Again = Callable[[UUID], AsyncGenerator[Event, None]]  # a later drive of the same run


class Delegator(Protocol):
    """What this module uses of an agent (``Agent`` is one)."""

    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def options(self) -> Any: ...  # AgentOptions: its ``delegates`` table

    def resume(
        self,
        run_id: UUID,
        *,
        claimed: RunRecord | None = ...,
        any_model: bool = ...,
        deps: Any = ...,
    ) -> AsyncGenerator[Event, None]: ...

    async def cancel(
        self,
        run_id: UUID,
        *,
        by: Principal | str,
        reason: str = ...,
        wait_seconds: float | None = ...,
        claimed: RunRecord | None = ...,
    ) -> RunRecord: ...

    async def check_resumable(self, run_id: UUID, *, any_model: bool = ...) -> None: ...


def _table(agent: Delegator) -> Mapping[str, Delegator]:
    table: Mapping[str, Delegator] | None = agent.options.delegates
    return table or {}


async def _started(store: Store, run_id: UUID) -> RunStarted | None:
    first = await store.read_events(run_id, limit=1)
    return first[0] if first and isinstance(first[0], RunStarted) else None


async def awaited(store: Store, run_id: UUID) -> list[UUID]:
    """The children a run waits for: those of its delegate calls left open, when it is
    ``awaiting_child`` (none otherwise)."""
    run = await store.get_run(run_id)
    if run is None or run.status != "awaiting_child":
        return []
    return await _open_children(store, run_id)


async def _open_children(store: Store, run_id: UUID) -> list[UUID]:
    opened: dict[str, UUID] = {}
    for event in await store.read_events(run_id):
        if isinstance(event, ToolCallStart) and event.name == DELEGATE:
            opened[event.tool_use_id] = child_run_id(run_id, event.tool_use_id)
        elif isinstance(event, ToolCallEnd | ToolCallRejected):
            opened.pop(event.tool_use_id, None)
    found = []
    for child in opened.values():
        if await store.get_run(child) is not None:
            found.append(child)
    return found


def _lease_live(run: RunRecord, now: datetime) -> bool:
    return run.lease_owner is not None and run.lease_until is not None and run.lease_until > now


async def _has_ended(store: Store, children: list[UUID]) -> bool:
    for child in children:
        run = await store.get_run(child)
        if run is not None and run.status in IDLE:
            return True
    return False


async def _movable(store: Store, child: UUID, now: datetime) -> bool:
    """Whether driving ``child`` now moves it: nobody holds its lease, and it is ``running``
    (its drive was cut off), suspended with nothing left pending (a decision to take up), or
    waiting for a child of its own that has ended."""
    run = await store.get_run(child)
    if run is None or run.status in IDLE or _lease_live(run, now):
        return False
    if run.status == "running":
        return True
    if run.status == "awaiting_child":
        return await _has_ended(store, await awaited(store, child))
    return not await store.list_approvals(run_id=child, status="pending")


async def agent_for(agent: Delegator, run_id: UUID) -> Delegator:
    """The agent that drives the delegated run ``run_id``: from ``agent``, the agent of the
    run a person started, down its chain of ``delegates`` tables; ``agent_mismatch`` when
    ``agent`` is not that run's or a table has no such name."""
    links = await lineage(agent.store, run_id)
    root = links[-1]
    if root.parent_run_id is not None:  # deeper than a tree may be
        raise RunError("agent_mismatch", f"run {run_id}: its chain of delegations is too deep")
    try:
        await agent.check_resumable(root.run_id)
    except RunError as exc:
        raise RunError(
            "agent_mismatch",
            f"run {run_id} was delegated from run {root.run_id}, which this agent does not "
            f"drive ({exc.message})",
        ) from None
    current = agent
    for link in reversed(links[:-1]):
        found = _table(current).get(link.delegate or "")
        if found is None:
            raise RunError(
                "agent_mismatch",
                f"run {link.run_id} was delegated to {link.delegate!r}, which is not in the "
                "delegates of the agent that drives its parent",
            )
        current = found
    return current


async def _primed(
    events: AsyncGenerator[Event, None], run_id: UUID, parent: UUID
) -> AsyncGenerator[Event, None]:
    """``events`` (a resume of the delegated run ``run_id``), its drive opened with the marks
    a delegated run is driven under: by its parent (``resumed_by_parent``) and in its
    parent's trace. The marks are set only while the drive opens (its first step), not across
    the consumer's iterations."""
    async with aclosing(events):
        resuming, delegating = _RESUMING.set(run_id), _DELEGATING.set(parent)
        try:
            first = await anext(events, None)
        finally:
            _RESUMING.reset(resuming)
            _DELEGATING.reset(delegating)
        if first is None:
            return
        yield first
        async for event in events:
            yield event


def resume(
    agent: Delegator,
    run_id: UUID,
    plain: Plain,
    *,
    claimed: RunRecord | None,
    any_model: bool,
) -> AsyncGenerator[Event, None]:
    """``Agent.resume``: a delegated run with the agent its parent's table names, then its
    end delivered; any other run driven by ``plain``, then ``followed``. An agent with no
    delegates table drives no delegated run but one its parent's call marks, and waits for
    no child: ``plain`` alone."""
    if agent.options.delegates is None:
        return plain(run_id, claimed)
    return _resume(agent, run_id, plain, claimed=claimed, any_model=any_model)


async def _resume(
    agent: Delegator,
    run_id: UUID,
    plain: Plain,
    *,
    claimed: RunRecord | None,
    any_model: bool,
) -> AsyncGenerator[Event, None]:
    store = agent.store
    started = await _started(store, run_id)
    parent = None if started is None else started.parent_run_id
    if parent is None or resumed_by_parent(run_id):
        drive = plain(run_id, claimed)
        async for event in followed(agent, run_id, drive, again(plain, parent)):
            yield event
        return
    target = await agent_for(agent, run_id)
    if claimed is not None:  # leased to this agent (a worker): its agent leases it again
        await store.release(run_id, epoch=claimed.epoch)
    async for event in _primed(target.resume(run_id, any_model=any_model), run_id, parent):
        yield event
    await deliver(agent, parent)


async def deliver(agent: Delegator, parent: UUID) -> None:
    """Resume ``parent`` if it waits for a child that has ended (its call gets the answer).
    A parent driven elsewhere is left to that drive's look after it releases its lease."""
    if not await _has_ended(agent.store, await awaited(agent.store, parent)):
        return
    try:
        async for _ in agent.resume(parent):
            pass
    except RunError as exc:
        log.info("run %s: its child's end is left for its own drive (%s)", parent, exc.message)


def plain(runs: Runs, any_model: bool = False, deps: Any = None) -> Plain:
    """A drive of one run to its next stop, as ``Agent.resume`` makes it for a run it drives."""
    return lambda run_id, claimed: runs.stream(
        partial(runs.reopen, run_id, claimed, any_model, deps)
    )


def rerun(runs: Runs, delegation: Delegation | None) -> Again:
    """A later drive of a run ``Agent.run`` started (with ``delegation``, if delegated)."""
    return again(plain(runs), None if delegation is None else delegation.parent_run_id)


def again(plain: Plain, parent: UUID | None) -> Again:
    """A later drive of a run (its parent ``parent``, if delegated: marked as its first)."""
    if parent is None:
        return lambda run_id: plain(run_id, None)
    return lambda run_id: _primed(plain(run_id, None), run_id, parent)


def followed(
    agent: Delegator,
    run_id: UUID | None,
    events: AsyncGenerator[Event, None],
    drive_again: Again,
) -> AsyncGenerator[Event, None]:
    """``events`` (a drive of the run ``run_id``: None, a new run's, read from its events),
    then, while that run waits for a child: the run driven again once a child has ended; a
    child that can move driven here first. (An agent with no delegates table: ``events``.)"""
    if agent.options.delegates is None:  # it cannot have delegated
        return events
    return _followed(agent, run_id, events, drive_again)


async def _followed(
    agent: Delegator,
    run_id: UUID | None,
    events: AsyncGenerator[Event, None],
    drive_again: Again,
) -> AsyncGenerator[Event, None]:
    async with aclosing(events):  # (a consumer that stops stops the drive)
        async for event in events:
            run_id = event.run_id
            yield event
    if run_id is None:
        return
    store, clock = agent.store, agent.clock
    for _ in range(_LOOKS):
        waiting = await awaited(store, run_id)
        if not waiting:
            return
        if not await _has_ended(store, waiting):
            movable = [c for c in waiting if await _movable(store, c, clock.now())]
            if not movable:
                return  # a person, or another process, moves them: their end is delivered
            for child in movable:
                if not await _drive_child(agent, run_id, child):
                    return
            continue
        try:
            async for event in drive_again(run_id):
                yield event
        except RunError as exc:  # leased by another drive meanwhile: it carries on
            if exc.code != "busy":
                raise
            return
    log.warning("run %s: still waiting for its children after %d looks", run_id, _LOOKS)


async def _drive_child(agent: Delegator, run_id: UUID, child: UUID) -> bool:
    """Drive ``child`` of ``run_id`` (``agent``'s run) with the agent its table names; False
    when it cannot be driven here (left for a sweep)."""
    started = await _started(agent.store, child)
    target = _table(agent).get(started.delegate or "") if started is not None else None
    if target is None:
        log.warning("run %s: no delegate of its agent drives its child %s", run_id, child)
        return False
    try:
        async for _ in _primed(target.resume(child), child, run_id):
            pass
    except RunError as exc:
        log.info("run %s: its child %s is not driven here (%s)", run_id, child, exc.message)
        return False
    return True


async def runs_to_resume(store: Store, clock: Clock) -> list[RunRecord]:
    """The store's runs to resume, and the runs waiting for a child that has ended (nobody
    leasing them): a crash between a child's end and its delivery leaves its parent so."""
    now = clock.now()
    runs = await store.runs_to_resume(now=now)
    listed = {r.run_id for r in runs}
    for run in await store.list_runs(status="awaiting_child", limit=_WAITING_LISTED):
        if run.run_id in listed or _lease_live(run, now):
            continue
        if await _has_ended(store, await _open_children(store, run.run_id)):
            runs.append(run)
    return runs


async def cancel(
    agent: Delegator,
    run_id: UUID,
    cancel_here: Callable[[], Any],
    *,
    by: Principal | str,
) -> RunRecord:
    """``Agent.cancel``: the run cancelled (``cancel_here``), then the children it waited for
    (with the agents its table names), then a waiting parent told of its end."""
    store = agent.store
    run = await store.get_run(run_id)
    # its open calls' children, waiting or driven now (the cancel closes the calls)
    waiting = [] if run is None or run.status in IDLE else await _open_children(store, run_id)
    record: RunRecord = await cancel_here()
    for child in waiting:
        started = await _started(store, child)
        target = _table(agent).get(started.delegate or "") if started is not None else None
        if target is None:
            continue
        with suppress(RunError):  # ended meanwhile, or busy: a sweep delivers what it does
            await target.cancel(child, by=by, reason="the run that delegated it was cancelled")
    started = await _started(store, run_id)
    if started is not None and started.parent_run_id is not None:
        with suppress(RunError):  # this agent may not drive the parent: a sweep delivers it
            await deliver(agent, started.parent_run_id)
    return record
