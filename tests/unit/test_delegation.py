"""Delegation: a child run of its own, linked to its parent, for the parent's principal, with
the intersection of whitelists and a share of the parent's budget; cycles and depth refused."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, ManualClock, capability
from fiduciary.capabilities import Capability
from fiduciary.delegation import DEPTH_LIMIT, child_run_id
from fiduciary.events import (
    Event,
    RunCompleted,
    RunStarted,
    ToolCallEnd,
    ToolCallRejected,
)
from fiduciary.exceptions import ConfigurationError, RunError
from fiduciary.stores.base import ApprovalRecord, Store
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Results,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)


@capability
async def get_balance() -> dict[str, str]:
    """The account's balance."""
    return {"usd": "42.00"}


def paying(done: list[str]) -> Capability:
    @capability(kind="execute", operation="pay", amount_usd=lambda args, ctx: Decimal(args.usd))
    async def pay(usd: str) -> dict[str, str]:
        """Pay an invoice."""
        done.append(usd)
        return {"paid": usd}

    return pay


def asking(task: str, **extra: Any) -> ToolCalls:
    return ToolCalls([Call("delegate", {"agent": "worker", "task": task, **extra})])


def relaying(results: Results) -> str:
    if "delegate" in results:
        return f"the worker said: {results['delegate']['text']}"
    return f"no answer: {results.errors.get('delegate', '')}"


def agent(
    store: Store,
    scripts: list[Script],
    caps: list[Capability],
    delegates: Mapping[str, Agent] | None = None,
    **options: Any,
) -> Agent:
    return Agent(
        model=ScriptedModel(scripts),
        capabilities=caps,
        store=store,
        clock=ManualClock(),
        authorize=allow_all,
        delegates=delegates,
        **options,
    )


def started_of(events: list[Event]) -> RunStarted:
    first = events[0]
    assert isinstance(first, RunStarted)
    return first


async def log(store: Store, run_id: UUID) -> list[Event]:
    return await store.read_events(run_id)


async def test_the_child_is_a_linked_run_of_the_parents_principal() -> None:
    store = MemoryStore()
    worker = agent(
        store,
        [Script("balance", [ToolCalls([Call("get_balance")]), Reply("it is $42.00")])],
        [get_balance],
    )
    manager = agent(
        store,
        [Script("how much", [asking("look up the balance"), Reply(relaying)])],
        [get_balance],
        {"worker": worker},
    )
    events = await collect(manager.run("how much do I have?", principal="alice"))
    parent = started_of(events)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "the worker said: it is $42.00"
    child_id = child_run_id(parent.run_id, "toolu_000_0")
    child = await store.get_run(child_id)
    assert child is not None
    assert child.principal == "alice"
    assert child.status == "completed"
    child_log = await log(store, child_id)
    first = started_of(child_log)
    assert first.parent_run_id == parent.run_id
    assert first.delegate == "worker"
    assert first.capabilities == ["get_balance"]
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    assert len(ends) == 1
    assert not ends[0].is_error
    assert str(child_id) in str(ends[0].output)
    assert len(await store.list_runs()) == 2
    # an old log's run_started (no delegation fields) still loads
    assert (
        RunStarted.model_validate(
            {**parent.model_dump(mode="json"), "parent_run_id": None}
        ).delegate
        is None
    )


async def test_the_child_may_not_do_what_the_parent_may_not() -> None:
    store, done = MemoryStore(), list[str]()
    worker = agent(
        store,
        [Script("invoice", [ToolCalls([Call("pay", {"usd": "5"})]), Reply("could not pay")])],
        [get_balance, paying(done)],
    )
    manager = agent(
        store,
        [Script("settle", [asking("pay the invoice"), Reply(relaying)])],
        [get_balance],
        {"worker": worker},
    )
    events = await collect(manager.run("settle my invoice", principal="alice"))
    child_id = child_run_id(started_of(events).run_id, "toolu_000_0")
    child_log = await log(store, child_id)
    assert started_of(child_log).capabilities == ["get_balance"]
    rejected = [e for e in child_log if isinstance(e, ToolCallRejected)]
    assert [(e.name, e.reason) for e in rejected] == [("pay", "not_allowed")]
    assert done == []


async def test_the_childs_writes_wait_for_a_person_and_the_parent_gets_the_answer() -> None:
    store, done = MemoryStore(), list[str]()
    worker = agent(
        store,
        [Script("invoice", [ToolCalls([Call("pay", {"usd": "5"})]), Reply("paid $5")])],
        [paying(done)],
    )
    manager = agent(
        store,
        [Script("settle", [asking("pay the invoice"), Reply(relaying)])],
        [paying([])],
        {"worker": worker},
    )
    first = await collect(manager.run("settle my invoice", principal="alice"))
    parent = started_of(first)
    child_id = child_run_id(parent.run_id, "toolu_000_0")
    # the parent waits durably: its drive ended, it holds no lease, its call is open
    waiting = await store.get_run(parent.run_id)
    assert waiting is not None
    assert waiting.status == "awaiting_child"
    assert waiting.lease_owner is None
    assert not [e for e in first if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    pending = await wait_for_pending(manager, child_id)
    assert pending.principal == "alice"
    await worker.approve(pending.approval_id, by="alice", confirm_amount=pending.amount_usd)
    # the child is resumed (with the worker: the manager's table names it), then the parent
    await collect(manager.resume(child_id))
    events = await log(store, parent.run_id)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "the worker said: paid $5"
    assert done == ["5"]
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    assert len(ends) == 1
    assert ends[0].recovery is None


async def test_a_share_beyond_the_parents_remaining_budget_is_refused() -> None:
    store = MemoryStore()
    worker = agent(store, [Script("balance", [Reply("it is $42.00")])], [get_balance])
    manager = agent(
        store,
        [Script("how much", [asking("the balance", budget_usd="5"), Reply(relaying)])],
        [get_balance],
        {"worker": worker},
        budget_usd="1.00",
    )
    events = await collect(manager.run("how much do I have?", principal="alice"))
    ends = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]
    assert len(ends) == 1
    assert ends[0].is_error
    assert "over_budget" in str(ends[0].output)
    assert len(await store.list_runs()) == 1  # no child was started


async def test_the_child_gets_the_parents_remaining_budget_and_turns() -> None:
    store = MemoryStore()
    worker = agent(store, [Script("balance", [Reply("it is $42.00")])], [get_balance])
    manager = agent(
        store,
        [Script("how much", [asking("the balance"), Reply(relaying)])],
        [get_balance],
        {"worker": worker},
        budget_usd="1.00",
        max_turns=5,
    )
    events = await collect(manager.run("how much do I have?", principal="alice"))
    child_id = child_run_id(started_of(events).run_id, "toolu_000_0")
    first = started_of(await log(store, child_id))
    assert first.budget_usd == Decimal("1.00")  # the scripted model is free: nothing spent
    assert first.max_turns is not None
    assert 1 <= first.max_turns <= 5


async def test_a_cycle_is_refused() -> None:
    store = MemoryStore()
    team: dict[str, Agent] = {}
    manager = agent(
        store,
        [
            Script("how much", [asking("check it"), Reply(relaying)]),
            Script("again", [asking("check it again"), Reply(relaying)]),
        ],
        [get_balance],
        team,
    )
    worker = agent(
        store,
        [
            Script(
                "check it",
                [
                    ToolCalls([Call("delegate", {"agent": "boss", "task": "again"})]),
                    Reply(lambda r: str(r.errors.get("delegate", "no error"))),
                ],
            )
        ],
        [get_balance],
        {"boss": manager},
    )
    team["worker"] = worker
    events = await collect(manager.run("how much do I have?", principal="alice"))
    child_id = child_run_id(started_of(events).run_id, "toolu_000_0")
    child_log = await log(store, child_id)
    done = child_log[-1]
    assert isinstance(done, RunCompleted)
    assert "delegation_cycle" in done.text
    assert len(await store.list_runs()) == 2  # the manager was not started again


def passing_up(results: Results) -> str:
    if "delegate" in results:
        return str(results["delegate"]["text"])
    return str(results.errors.get("delegate", "no answer"))


async def test_a_fourth_level_is_refused() -> None:
    store = MemoryStore()
    # level 0 is the person's run; levels 1-3 are delegations; level 4 would be one too many
    below = agent(store, [Script("level 4", [Reply("bottom")])], [get_balance])
    for level in reversed(range(DEPTH_LIMIT + 1)):
        steps: list[ToolCalls | Reply] = [
            ToolCalls([Call("delegate", {"agent": "next", "task": f"level {level + 1}"})]),
            Reply(passing_up),
        ]
        below = agent(store, [Script(f"level {level}", steps)], [get_balance], {"next": below})
    events = await collect(below.run("level 0", principal="alice"))
    assert len(await store.list_runs()) == DEPTH_LIMIT + 1  # the root and three delegations
    final = events[-1]
    assert isinstance(final, RunCompleted)
    assert "delegation_too_deep" in final.text


def test_a_delegate_name_is_checked() -> None:
    store = MemoryStore()
    other = agent(store, [], [get_balance])
    with pytest.raises(ConfigurationError):
        agent(store, [], [get_balance], {"bad name!": other})


def asyncio_task(coro: Any) -> asyncio.Task[list[Event]]:
    return asyncio.ensure_future(coro)


async def wait_for_pending(owner: Agent, run_id: UUID) -> ApprovalRecord:
    async with asyncio.timeout(10):
        while True:
            pending = await owner.pending_approvals(run_id=run_id)
            if pending:
                return pending[0]
            await asyncio.sleep(0.01)  # the child's drive suspends in another task


async def test_only_the_parents_call_resumes_a_delegated_run() -> None:
    store = MemoryStore()
    worker = agent(store, [Script("balance", [Reply("it is $42.00")])], [get_balance])
    manager = agent(
        store,
        [Script("how much", [asking("look up the balance"), Reply(relaying)])],
        [get_balance],
        {"worker": worker},
    )
    events = await collect(manager.run("how much do I have?", principal="alice"))
    child_id = child_run_id(started_of(events).run_id, "toolu_000_0")
    for other in (worker, manager):  # either agent's capabilities cover the child's whitelist
        with pytest.raises(RunError) as refused:
            await other.check_resumable(child_id)
        assert refused.value.code == "agent_mismatch"
