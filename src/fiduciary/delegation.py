"""Delegation: a parent run hands a task to another agent, whose run is a run of its own.

An agent declared with ``delegates={"worker": worker_agent}`` gets one more capability,
``delegate(agent, task, budget_usd=None, max_turns=None)``. Its call starts the child run,
linked to the parent (``run_started.parent_run_id`` and ``delegate``, the name the parent
called it by), and waits for its end; the child's final answer is the call's result.

The child acts for the parent's principal (so its writes pass the same daily autonomous limit
and lock), may call only what both the parent's run and the child agent may call (the
intersection of their whitelists; a plan-first parent makes a plan-first child), and gets a
share of the parent's remaining budget and turns: what the call asks for, which may not exceed
what is left (the parent's own spend and every earlier child's count), or all of it. A
delegation deeper than ``DEPTH_LIMIT`` or back to an agent already in the chain is refused.

Crash safety comes from the ids: the child's run id is derived from the parent's run id and
the call's ``tool_use_id``, and the call is replayable. The call drives the child it starts to
its first stop; a child that has not ended then (it waits for a person, or its drive was cut
off) leaves the parent waiting durably: the call stays open, the parent's drive ends with the
run ``awaiting_child``, holding no lease and nothing in memory. The call runs again when the
parent is resumed, and finds the child's run instead of starting another: an ended child
gives its recorded answer, one still going leaves the parent waiting again. The parent's
``tool_call_end`` is written once, so the child's answer reaches it once.

Who drives what (``fiduciary._agent.delegated``): a delegated run is driven with the agent its
parent's table names, found from the agent of the run a person started; whoever drives a
child to its end resumes its waiting parent, and a sweep finds a waiting parent whose child
has ended (a crash between the two).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID, uuid5

from pydantic import BaseModel, ConfigDict, Field

from ._gates.attempt import AwaitingRun
from .capabilities import CallContext, Capability, Kind, capability
from .events import (
    Event,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCallStart,
    TurnComplete,
    Usage,
    UserMessage,
)
from .exceptions import CapabilityError, ConfigurationError, ConflictError, RunError
from .models.base import AssistantMessage, Message, ToolResultsMessage
from .stores.base import IDLE, Store

if TYPE_CHECKING:
    from .gates import Gates

__all__ = [
    "DELEGATE",
    "DEPTH_LIMIT",
    "DelegateInput",
    "DelegateResult",
    "Delegation",
    "Link",
    "child_run_id",
    "children",
    "delegate_capability",
    "delegated_spend",
    "delegating_run",
    "ended",
    "handoff_answer",
    "lineage",
    "resumed_by_parent",
    "settling",
    "with_delegates",
]

DELEGATE = "delegate"  # the capability's name
DEPTH_LIMIT = 3  # delegations nested below a run started by a person (the seed's callback depth)
# the call drives its child to its first stop (the child's own calls have their timeouts)
TIMEOUT_SECONDS = 7 * 24 * 3600.0
_COMMIT_WAITS = 500  # x 10 ms: the parent's log is committed within 5 ms unless the store lags
_IDS = UUID("6d1c3f5e-8a51-4b7e-9a0e-2f8f4d3c1b29")


class DelegationOwner(Protocol):
    """What delegation reads of the delegating agent's options (``AgentOptions`` is one)."""

    @property
    def store(self) -> Store: ...
    @property
    def budget_usd(self) -> Decimal | None: ...
    @property
    def max_turns(self) -> int: ...


class DelegatingAgent(Protocol):
    """What delegation reads of an agent (``Agent`` is one)."""

    store: Store
    budget_usd: Decimal | None
    max_turns: int
    gates: Gates

    def run(
        self,
        message: str,
        *,
        principal: Any,
        run_id: UUID | None = ...,
        capabilities: Iterable[str] | None = ...,
        plan_first: bool = ...,
        delegation: Delegation | None = ...,
    ) -> AsyncGenerator[Event, None]: ...

    def resume(self, run_id: UUID) -> AsyncGenerator[Event, None]: ...

    async def submit(
        self,
        message: str,
        *,
        principal: Any,
        run_id: UUID | None = ...,
        capabilities: Iterable[str] | None = ...,
        plan_first: bool = ...,
        delegation: Delegation | None = ...,
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class Delegation:
    """What a child's ``run_started`` records of its delegation."""

    parent_run_id: UUID
    name: str
    budget_usd: Decimal | None = None
    max_turns: int | None = None

    def recorded(self) -> dict[str, Any]:
        return {
            "parent_run_id": self.parent_run_id,
            "delegate": self.name,
            "budget_usd": self.budget_usd,
            "max_turns": self.max_turns,
        }


class DelegateInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    agent: str = Field(description="the name of the agent to hand the task to")
    task: str = Field(min_length=1, description="what the agent should do, self-contained")
    budget_usd: Decimal | None = Field(
        default=None, ge=0, description="its model budget (default: all that is left)"
    )
    max_turns: int | None = Field(
        default=None, ge=1, description="its model turns (default: all that are left)"
    )
    handoff: bool = Field(
        default=False,
        description="its answer goes to the person as yours, ending your turn (no reply of yours)",
    )


class DelegateResult(BaseModel):
    agent: str
    run_id: str
    status: str  # completed | failed | cancelled
    text: str  # the child's final answer, or why it failed
    cost_usd: str  # what the child's model calls cost (its own children's included)
    handoff: bool = False  # its answer is the parent's final answer (the loop ends the run)


def child_run_id(parent_run_id: UUID, tool_use_id: str) -> UUID:
    """The run id of the child a delegate call starts: the same after any number of replays."""
    return uuid5(_IDS, f"{parent_run_id}:{tool_use_id}")


# the agents of the delegations this task is inside of: a delegation back to one is a cycle
# (names are no identity: each parent names its delegates in its own table)
_CHAIN: ContextVar[tuple[object, ...]] = ContextVar("fiduciary_delegation_chain", default=())


# set while a drive settles its open calls under the principal's lock: a delegate call then
# records its child's run without driving it (the child's writes take that lock, across
# processes on PostgreSQL); the parent waits for it, and it is driven once the lock is released
_SETTLING: ContextVar[bool] = ContextVar("fiduciary_delegation_settling", default=False)


@contextmanager
def settling() -> Iterator[None]:
    """Around a section under the principal's lock: a child started there is not driven."""
    token = _SETTLING.set(True)
    try:
        yield
    finally:
        _SETTLING.reset(token)


# the child run its parent's delegate call is resuming in this task: a delegated run is driven
# only so, with the agent the parent's table names (any other agent whose capabilities cover
# the child's whitelist would otherwise take it up from a sweep, with the wrong model script)
_RESUMING: ContextVar[UUID | None] = ContextVar("fiduciary_delegation_resuming", default=None)


# the parent run whose delegate call is driving a child in this task: a tracer links the
# child's drive to the parent's trace (each run has a trace of its own: fiduciary.observability)
_DELEGATING: ContextVar[UUID | None] = ContextVar("fiduciary_delegating_run", default=None)


def delegating_run() -> UUID | None:
    """The parent run whose delegate call drives the run being driven in this task, if any."""
    return _DELEGATING.get()


def resumed_by_parent(run_id: UUID) -> bool:
    """Whether the delegated run ``run_id`` is being resumed by its parent's delegate call."""
    return _RESUMING.get() == run_id


def with_delegates(
    capabilities: Iterable[Capability],
    owner: DelegationOwner,
    delegates: Mapping[str, DelegatingAgent] | None,
) -> list[Capability]:
    """``capabilities`` and, when delegates are given (a table, even one filled in later),
    the ``delegate`` capability."""
    caps = list(capabilities)
    if delegates is not None:
        caps.append(delegate_capability(owner, delegates))
    return caps


def delegate_capability(
    owner: DelegationOwner, delegates: Mapping[str, DelegatingAgent]
) -> Capability:
    """The ``delegate`` capability of ``owner``, which may hand tasks to ``delegates``."""
    # read at each call, not copied: agents that delegate to each other are built one after
    # the other, the first one's table filled in last (a cycle is refused per call)
    table = delegates
    for name, child in table.items():
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigurationError(f"delegate name {name!r}: use letters, digits, _ or -")
        if child is owner or getattr(child, "options", None) is owner:
            raise ConfigurationError(f"delegate {name!r} is the agent itself")
    listed = ", ".join(sorted(table))

    async def delegate(call: DelegateInput, ctx: CallContext) -> DelegateResult:
        child = table.get(call.agent)
        if child is None:
            known = ", ".join(sorted(table))
            raise CapabilityError(
                "unknown_delegate", f"no agent named {call.agent!r}; you may ask: {known}"
            )
        if child.store is not owner.store:
            raise CapabilityError("misconfigured", "the delegate does not share this store")
        child_id = child_run_id(ctx.run_id, ctx.tool_use_id)
        token = _DELEGATING.set(ctx.run_id)
        try:
            if await owner.store.get_run(child_id) is None:
                await _committed(owner.store, ctx.run_id, ctx.tool_use_id)
                await _start(owner, child, call, ctx, child_id)
            result = await ended(child.store, call.agent, child_id)
        finally:
            _DELEGATING.reset(token)
        if result is None:  # the parent waits for it, durably (awaiting_child)
            raise AwaitingRun(child_id)
        return result.model_copy(update={"handoff": call.handoff})

    return capability(
        name=DELEGATE,
        description=(
            "Hand a task to another agent and wait for its answer. It acts for the same person, "
            "may do only what you may do, and spends from your remaining budget."
            + (f" Agents you may ask: {listed}." if listed else "")
        ),
        kind=Kind.READ,  # its effects are the child's calls, each through the child's gates
        input_model=DelegateInput,
        timeout=TIMEOUT_SECONDS,
    )(delegate)


async def _start(
    owner: DelegationOwner,
    child: DelegatingAgent,
    call: DelegateInput,
    ctx: CallContext,
    child_id: UUID,
) -> None:
    """Check the delegation and start the child's run (its first drive, to its first stop)."""
    store = owner.store
    parent = await _started(store, ctx.run_id)
    chain = [parent]
    while chain[-1].parent_run_id is not None:
        chain.append(await _started(store, chain[-1].parent_run_id))
        if len(chain) > DEPTH_LIMIT + 1:
            break
    if len(chain) > DEPTH_LIMIT:
        raise CapabilityError(
            "delegation_too_deep",
            f"delegations may be nested {DEPTH_LIMIT} deep; this one would be {len(chain)}",
        )
    agents = (*_CHAIN.get(), owner)  # (an agent is known by its options: AgentOptions)
    known_as = getattr(child, "options", child)
    if any(known_as is a for a in agents):
        raise CapabilityError(
            "delegation_cycle", f"{call.agent} is already working on this task further up"
        )
    names = [n for n in child.gates.names if n in set(parent.capabilities)]
    plan_first = not set(parent.allowed_kinds) >= {k.value for k in Kind}
    budget = await _remaining_budget(store, owner, parent)
    if call.budget_usd is not None:
        if budget is not None and call.budget_usd > budget:
            raise CapabilityError(
                "over_budget",
                f"the task asks for ${call.budget_usd} but ${budget} of the budget is left",
            )
        budget = call.budget_usd
    turns = await _remaining_turns(store, owner, parent)
    if call.max_turns is not None:
        if call.max_turns > turns:
            raise CapabilityError(
                "over_turns", f"the task asks for {call.max_turns} turns but {turns} are left"
            )
        turns = call.max_turns
    if turns < 1:
        raise CapabilityError("over_turns", "no model turns are left to hand on")
    delegation = Delegation(ctx.run_id, call.agent, budget, turns)
    token = _CHAIN.set(agents)
    try:
        if _SETTLING.get():  # recorded only: driven once the lock is released
            await child.submit(
                call.task,
                principal=ctx.principal,
                run_id=child_id,
                capabilities=names,
                plan_first=plan_first,
                delegation=delegation,
            )
            return
        events = child.run(
            call.task,
            principal=ctx.principal,
            run_id=child_id,
            capabilities=names,
            plan_first=plan_first,
            delegation=delegation,
        )
        async for _ in events:
            pass
    except ConflictError:  # another drive of this call recorded it meanwhile
        pass
    except RunError as exc:
        if exc.code != "busy":  # busy: another drive of this call created it meanwhile
            raise CapabilityError("delegation_failed", exc.message) from None
    finally:
        _CHAIN.reset(token)


async def _committed(store: Store, run_id: UUID, tool_use_id: str) -> None:
    """Wait (a few commit delays) until the parent's ``tool_call_start`` of this call is
    durable: a child is never started by a call a crash could erase from the parent's log."""
    for _ in range(_COMMIT_WAITS):
        for event in await store.read_events(run_id):
            if isinstance(event, ToolCallStart) and event.tool_use_id == tool_use_id:
                return
        await asyncio.sleep(0.01)  # the parent's writer commits within its commit delay
    raise CapabilityError("delegation_failed", "the parent's log did not record this call")


async def ended(store: Store, name: str, child_id: UUID) -> DelegateResult | None:
    """The child's answer once it has ended (completed, failed or cancelled); None before."""
    run = await store.get_run(child_id)
    if run is None:
        raise CapabilityError("delegation_failed", "the delegated run is missing")
    if run.status not in IDLE:
        return None
    return await _result(store, name, child_id, run.status)


async def _result(store: Store, name: str, run_id: UUID, status: str) -> DelegateResult:
    events = await store.read_events(run_id)
    text = ""
    for event in reversed(events):
        if isinstance(event, RunCompleted):
            text = event.text
            break
        if isinstance(event, RunFailed):
            text = f"failed ({event.reason}): {event.message}"
            break
    spent = await _spent(store, run_id, events)
    return DelegateResult(
        agent=name, run_id=str(run_id), status=status, text=text, cost_usd=str(spent)
    )


async def _started(store: Store, run_id: UUID) -> RunStarted:
    first = await store.read_events(run_id, limit=1)
    if not first or not isinstance(first[0], RunStarted):
        raise CapabilityError("delegation_failed", f"run {run_id} has no run_started")
    return first[0]


async def _spent(store: Store, run_id: UUID, events: list[Event] | None = None) -> Decimal:
    """What a run's model calls cost, with those of the children it delegated to."""
    if events is None:
        events = await store.read_events(run_id)
    own, delegated = Decimal(0), Decimal(0)
    for event in events:
        if isinstance(event, Usage) and event.total_cost_usd is not None:
            own = event.total_cost_usd  # the run's total so far
        elif isinstance(event, ToolCallStart) and event.name == DELEGATE:
            child = child_run_id(run_id, event.tool_use_id)
            if await store.get_run(child) is not None:
                delegated += await _spent(store, child)
    return own + delegated


async def _remaining_budget(
    store: Store, owner: DelegationOwner, parent: RunStarted
) -> Decimal | None:
    budgets = [b for b in (owner.budget_usd, parent.budget_usd) if b is not None]
    if not budgets:
        return None
    return max(Decimal(0), min(budgets) - await _spent(store, parent.run_id))


async def _remaining_turns(store: Store, owner: DelegationOwner, parent: RunStarted) -> int:
    """The parent's turns left for its current message (the loop counts them the same way)."""
    limit = min(t for t in (owner.max_turns, parent.max_turns) if t is not None)
    used = 0
    for event in await store.read_events(parent.run_id):
        if isinstance(event, UserMessage):
            used = 0
        elif isinstance(event, TurnComplete):
            used += 1
    return limit - used


@dataclass(frozen=True, slots=True)
class Link:
    """One run of a delegation tree: its id, the name its parent called it by (None: a run a
    person started), its parent, and its title (the task it was given)."""

    run_id: UUID
    delegate: str | None
    parent_run_id: UUID | None
    title: str


async def lineage(store: Store, run_id: UUID) -> list[Link]:
    """The run and the runs that delegated to it, up to the one a person started: what a card
    shows of a child's pending approval (the parent's task it serves)."""
    links: list[Link] = []
    current: UUID | None = run_id
    while current is not None and len(links) <= DEPTH_LIMIT:
        started = await _started(store, current)
        record = await store.get_run(current)
        title = record.title if record is not None else ""
        links.append(Link(current, started.delegate, started.parent_run_id, title))
        current = started.parent_run_id
    return links


async def children(store: Store, run_id: UUID) -> list[UUID]:
    """The runs a run delegated to, in the order of its calls."""
    found = []
    for event in await store.read_events(run_id):
        if isinstance(event, ToolCallStart) and event.name == DELEGATE:
            child = child_run_id(run_id, event.tool_use_id)
            if await store.get_run(child) is not None:
                found.append(child)
    return found


def handoff_answer(messages: Sequence[Message]) -> str | None:
    """The child's answer when the model's last turn handed off to it (``handoff``) and every
    call of that turn has its result: the parent's final answer, with no turn of its own."""
    if len(messages) < 2:
        return None
    results, turn = messages[-1], messages[-2]
    if not isinstance(results, ToolResultsMessage) or not isinstance(turn, AssistantMessage):
        return None
    handed = {u.id for u in turn.tool_uses if u.name == DELEGATE}
    for result in results.results:
        if result.tool_use_id not in handed or result.is_error:
            continue
        try:
            answer = DelegateResult.model_validate_json(result.content)
        except ValueError:
            continue
        if answer.handoff and answer.status == "completed":
            return answer.text
    return None


def delegated_spend(messages: Sequence[Message]) -> Decimal:
    """What the children this run delegated to spent, as their results report it: the loop
    prices the parent's own model turns against its budget with it."""
    ids: set[str] = set()
    total = Decimal(0)
    for message in messages:
        if isinstance(message, AssistantMessage):
            ids.update(u.id for u in message.tool_uses if u.name == DELEGATE)
        elif isinstance(message, ToolResultsMessage) and ids:
            for result in message.results:
                if result.tool_use_id in ids and not result.is_error:
                    try:
                        total += Decimal(
                            DelegateResult.model_validate_json(result.content).cost_usd
                        )
                    except (ValueError, ArithmeticError):
                        continue
    return total
