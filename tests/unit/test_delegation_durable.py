"""The parent waits durably: while its child has not ended, a delegating run is suspended
``awaiting_child`` (no lease, nothing in memory); the child's end reaches it once, whoever
drives the child; a sweep moves every run that can move; cancelling works both ways."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, ManualClock, capability
from fiduciary.capabilities import Capability
from fiduciary.delegation import _RESUMING, DelegateResult, child_run_id
from fiduciary.events import Event, RunCompleted, RunStarted, ToolCallEnd, ToolCallRejected
from fiduciary.exceptions import RunError
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import (
    Call,
    MemoryStore,
    Reply,
    Results,
    Script,
    ToolCalls,
    collect,
)
from tests.agent_support import make_agent
from tests.faults.delegation_wait_child import CHILD as OTHER_CHILD
from tests.faults.delegation_wait_child import PARENT as OTHER_PARENT
from tests.faults.test_delegation_wait_kill import play
from tests.waiting import eventually


def paying(done: list[str]) -> Capability:
    @capability(kind="execute", operation="pay", amount_usd=lambda args, ctx: Decimal(args.usd))
    async def pay(usd: str) -> dict[str, str]:
        """Pay an invoice."""
        done.append(usd)
        return {"paid": usd}

    return pay


def relaying(results: Results) -> str:
    if "delegate" in results:
        return f"the worker said: {results['delegate']['text']}"
    return f"no answer: {results.errors.get('delegate', '')}"


def paying_agent(store: Store, done: list[str], **options: Any) -> Agent:
    """An agent whose model pays $5 (the payment waits for a person) into ``done``."""
    return make_agent(
        None,
        store,
        ManualClock(),
        Script("invoice", [ToolCalls([Call("pay", {"usd": "5"})]), Reply("paid $5")]),
        capabilities=[paying(done)],
        **options,
    )


def delegator(
    store: Store, task: dict[str, Any], to: Agent, *, script: str = "settle", **options: Any
) -> Agent:
    """An agent whose model (its script named ``script``) delegates ``task`` to ``to`` (the
    agent ``task`` names) and relays the answer."""
    return make_agent(
        None,
        store,
        ManualClock(),
        Script(script, [ToolCalls([Call("delegate", task)]), Reply(relaying)]),
        capabilities=[paying([])],
        delegates={task["agent"]: to},
        **options,
    )


def pair(
    store: Store, done: list[str], *, handoff: bool = False, **worker_options: Any
) -> tuple[Agent, Agent]:
    """A manager delegating a $5 payment (it waits for a person) to its worker."""
    worker = paying_agent(store, done, **worker_options)
    task = {"agent": "worker", "task": "pay the invoice", "handoff": handoff}
    return delegator(store, task, worker), worker


async def waiting_pair(
    store: Store, done: list[str], **options: Any
) -> tuple[Agent, Agent, UUID, UUID]:
    """The pair, the manager's run started: the parent waiting for its child, the child for
    a person."""
    manager, worker = pair(store, done, **options)
    events = await collect(manager.run("settle my invoice", principal="alice"))
    first = events[0]
    assert isinstance(first, RunStarted)
    return manager, worker, first.run_id, child_run_id(first.run_id, "toolu_000_0")


def delegate_ends(events: list[Event]) -> list[ToolCallEnd]:
    return [e for e in events if isinstance(e, ToolCallEnd) and e.name == "delegate"]


async def test_the_parent_waits_holding_nothing_and_a_new_message_is_refused() -> None:
    store, done = MemoryStore(), list[str]()
    manager, _, parent, child = await waiting_pair(store, done)
    run = await store.get_run(parent)
    assert run is not None
    assert run.status == "awaiting_child"
    assert run.lease_owner is None
    assert run.lease_until is None
    assert (await store.get_run(child)).status == "awaiting_approval"  # type: ignore[union-attr]
    assert delegate_ends(await store.read_events(parent)) == []
    with pytest.raises(RunError) as refused:
        await collect(manager.run("and another thing", principal="alice", run_id=parent))
    assert refused.value.code == "state"
    assert "delegated" in refused.value.message
    # nothing to move: a sweep leaves both as they are
    assert await manager.resume_all() == []
    assert (await store.get_run(parent)).status == "awaiting_child"  # type: ignore[union-attr]


async def test_approving_the_childs_action_in_another_process_completes_both(
    tmp_path: Path,
) -> None:
    """The manager's run starts in one process; a person's approval of the child's payment in
    another one (which then sweeps) completes the child and the parent."""
    db = str(tmp_path / "runs.sqlite3")
    started = play("sqlite", db, tmp_path, "2026-01-01T00:00:00+00:00", "confirm", "start")
    assert started["status"] == "awaiting_child"
    store = SQLiteStore(db)
    try:
        parent = await store.get_run(OTHER_PARENT)
        assert parent is not None
        assert parent.status == "awaiting_child"
        assert parent.lease_owner is None  # the parent holds no lease while it waits
        child = await store.get_run(OTHER_CHILD)
        assert child is not None
        assert child.status == "awaiting_approval"
        assert len(await store.list_approvals(run_id=OTHER_CHILD, status="pending")) == 1
    finally:
        await store.close()

    done = play("sqlite", db, tmp_path, "2026-01-01T00:01:00+00:00", "confirm", "approve")
    assert done["runs"] == ["completed", "completed"]
    assert done["final"] == ["the worker said: paid $900"]
    assert len(done["effects"]) == 1
    store = SQLiteStore(db)
    try:
        events = await store.read_events(OTHER_PARENT)
    finally:
        await store.close()
    (end,) = delegate_ends(events)  # the child's answer, once
    assert end.recovery is None
    assert not end.is_error
    answer = DelegateResult.model_validate_json(end.output)
    assert (answer.status, answer.text) == ("completed", "paid $900")
    ends_text = [e.output for e in events if isinstance(e, ToolCallEnd)]
    assert sum(out.count("paid $900") for out in ends_text) == 1


async def test_the_sweep_drives_the_child_with_its_agent_then_the_parent() -> None:
    store, done = MemoryStore(), list[str]()
    manager, worker, parent, child = await waiting_pair(store, done)
    # another agent with the manager's capabilities and model: not the one its table names
    impostor = make_agent(None, store, ManualClock(), capabilities=[paying([])])
    (pending,) = await manager.pending_approvals(run_id=child)
    await worker.approve(pending.approval_id, by="alice", confirm_amount=Decimal("5"))
    assert await impostor.resume_all() == []  # refused: a delegated run is not its to drive
    assert (await store.get_run(child)).status == "awaiting_approval"  # type: ignore[union-attr]
    sweeping = asyncio.create_task(manager.keep_runs_moving(every=0.05))
    try:
        await eventually(lambda: _status(store, parent, "completed"), what="the parent to complete")
    finally:
        sweeping.cancel()
        await asyncio.gather(sweeping, return_exceptions=True)
    assert done == ["5"]
    events = await store.read_events(parent)
    assert len(delegate_ends(events)) == 1
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "the worker said: paid $5"


async def _status(store: Store, run_id: UUID, status: str) -> bool:
    run = await store.get_run(run_id)
    return run is not None and run.status == status


async def test_a_child_that_ended_undelivered_is_delivered_by_a_sweep() -> None:
    """The crash window: the child ended, its parent was never resumed (the process that
    drove the child died). A sweep finds the waiting parent whose child has ended."""
    store, done = MemoryStore(), list[str]()
    manager, worker, parent, child = await waiting_pair(store, done)
    (pending,) = await manager.pending_approvals(run_id=child)
    await worker.approve(pending.approval_id, by="alice", confirm_amount=Decimal("5"))
    token = _RESUMING.set(child)  # the child driven alone, as its parent's table would
    try:
        await collect(worker.resume(child))
    finally:
        _RESUMING.reset(token)
    assert await _status(store, child, "completed")
    assert await _status(store, parent, "awaiting_child")
    assert await manager.resume_all() == [parent]
    events = await store.read_events(parent)
    assert len(delegate_ends(events)) == 1
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "the worker said: paid $5"
    assert await manager.resume_all() == []  # delivered once: nothing left


async def test_cancelling_the_parent_cancels_the_child_it_waits_for() -> None:
    store, done = MemoryStore(), list[str]()
    manager, _, parent, child = await waiting_pair(store, done)
    await manager.cancel(parent, by="alice", reason="changed my mind")
    assert await _status(store, parent, "cancelled")
    assert await _status(store, child, "cancelled")
    assert await manager.pending_approvals(run_id=child) == []  # its approval closed
    rejected = [e for e in await store.read_events(parent) if isinstance(e, ToolCallRejected)]
    assert [(e.name, e.reason) for e in rejected] == [("delegate", "cancelled")]
    assert done == []


async def test_cancelling_the_child_gives_the_parent_a_cancelled_result_once() -> None:
    store, done = MemoryStore(), list[str]()
    manager, _, parent, child = await waiting_pair(store, done)
    await manager.cancel(child, by="alice", reason="not this one")
    assert await _status(store, child, "cancelled")
    events = await store.read_events(parent)
    (end,) = delegate_ends(events)
    answer = DelegateResult.model_validate_json(end.output)
    assert answer.status == "cancelled"
    assert "not this one" in answer.text
    assert isinstance(events[-1], RunCompleted)  # the parent's model read it and answered
    assert await manager.resume_all() == []
    assert len(delegate_ends(await store.read_events(parent))) == 1
    assert done == []


async def test_a_handoff_from_a_waiting_child_ends_the_parent_with_its_answer() -> None:
    store, done = MemoryStore(), list[str]()
    manager, worker, parent, child = await waiting_pair(store, done, handoff=True)
    assert await _status(store, parent, "awaiting_child")
    (pending,) = await manager.pending_approvals(run_id=child)
    await worker.approve(pending.approval_id, by="alice", confirm_amount=Decimal("5"))
    await collect(manager.resume(child))
    events = await store.read_events(parent)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "paid $5"  # the child's answer as the parent's own
    assert len(delegate_ends(events)) == 1


async def test_a_refused_delegation_leaves_nothing_waiting() -> None:
    """A refusal (here a share beyond the parent's budget) is the call's error result: no
    child, no wait; the parent's model reads it and answers."""
    store, done = MemoryStore(), list[str]()
    worker = make_agent(None, store, ManualClock(), capabilities=[paying(done)])
    task = {"agent": "worker", "task": "pay the invoice", "budget_usd": "5"}
    manager = delegator(store, task, worker, budget_usd="1.00")
    events = await collect(manager.run("settle my invoice", principal="alice"))
    (end,) = delegate_ends(events)
    assert end.is_error
    assert "over_budget" in end.output
    assert isinstance(events[-1], RunCompleted)
    assert [r.status for r in await store.list_runs()] == ["completed"]  # no child, no wait
    assert done == []


async def test_a_chain_of_two_waits_and_is_delivered_level_by_level() -> None:
    """manager → worker → payer, the payer's payment waiting for a person: both delegating
    runs wait; the payer's end reaches the worker, the worker's the manager, once each."""
    store, done = MemoryStore(), list[str]()
    payer = paying_agent(store, done)
    ask = {"agent": "payer", "task": "pay the invoice"}
    worker = delegator(store, ask, payer, script="invoice")
    task = {"agent": "worker", "task": "see to the invoice"}
    manager = delegator(store, task, worker)
    first = (await collect(manager.run("settle my invoice", principal="alice")))[0]
    middle = child_run_id(first.run_id, "toolu_000_0")
    leaf = child_run_id(middle, "toolu_000_0")
    assert await _status(store, first.run_id, "awaiting_child")
    assert await _status(store, middle, "awaiting_child")
    assert await _status(store, leaf, "awaiting_approval")
    (pending,) = await manager.pending_approvals(run_id=leaf)
    await payer.approve(pending.approval_id, by="alice", confirm_amount=Decimal("5"))
    assert first.run_id not in await manager.resume_all()  # its child's end brought it
    events = await store.read_events(first.run_id)
    assert isinstance(events[-1], RunCompleted)
    assert events[-1].text == "the worker said: the worker said: paid $5"
    assert len(delegate_ends(events)) == 1
    assert len(delegate_ends(await store.read_events(middle))) == 1
    assert done == ["5"]
