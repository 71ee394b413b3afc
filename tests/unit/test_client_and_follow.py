"""Client-executed actions, following a run's events, audit rows and resume_all."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, ApprovalError, PendingAction, RunCompleted, RunError, capability
from fiduciary.events import Event, TextDelta, ToolCallEnd
from fiduciary.stores.base import Store
from fiduciary.testing import (
    Call,
    ManualClock,
    MemoryStore,
    Reply,
    Script,
    ScriptedModel,
    ToolCalls,
    allow_all,
    collect,
)
from tests.agent_support import Effects, toy_capabilities
from tests.waiting import eventually


@capability(
    kind="execute",
    executor="client",
    operation="send",
    amount_usd=lambda args, ctx: Decimal(args.amount),
)
async def sign_and_send(to: str, amount: str) -> dict[str, str]:
    """The person's device signs and broadcasts this transfer; the server never runs it."""
    raise AssertionError("a client-executed capability never runs on the server")


async def test_client_executed_action_waits_for_the_clients_result(
    store: Store, clock: ManualClock
) -> None:
    script = Script(
        "sign",
        [
            ToolCalls([Call("sign_and_send", {"to": "bob", "amount": "3"})]),
            Reply(lambda r: f"digest {r['sign_and_send']['digest']}"),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[sign_and_send],
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run("sign it", principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert pending.executor == "client"
    run_id = events[0].run_id
    assert (await agent.get_run(run_id)).status == "awaiting_client_result"
    with pytest.raises(ApprovalError) as err:
        await agent.approve(pending.approval_id, by="alice")
    assert err.value.code == "client_executed"
    with pytest.raises(ApprovalError) as err:
        await agent.submit_result(
            pending.approval_id, {"digest": "0xabc", "secret": "x"}, by="mallory"
        )
    assert err.value.code == "forbidden"
    await agent.submit_result(pending.approval_id, {"digest": "0xabc"}, by="alice")
    more = await collect(agent.resume(run_id))
    (end,) = [e for e in more if isinstance(e, ToolCallEnd)]
    assert json.loads(end.output) == {"digest": "0xabc"}
    assert isinstance(more[-1], RunCompleted)
    assert more[-1].text == "digest 0xabc"
    with pytest.raises(ApprovalError):
        await agent.submit_result(pending.approval_id, {"digest": "0xdef"})


async def test_events_replays_then_follows_without_gap_or_duplicate(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "hello", [Reply("hi there, friend", chunk_chars=3), Reply("again", chunk_chars=2)]
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
    )
    first = await collect(agent.run("hello", principal="alice"))
    run_id = first[0].run_id
    # replay only
    replayed = await collect(agent.events(run_id, after_seq=3, follow=False))
    assert [e.seq for e in replayed] == [e.seq for e in first][3:]
    # follow: a listener attached mid-log sees the rest and then the live continuation
    seen: list[Event] = []

    async def listen() -> None:
        async for event in agent.events(run_id, after_seq=2):
            seen.append(event)
            if isinstance(event, RunCompleted) and event.seq > first[-1].seq:
                return

    listener = asyncio.create_task(listen())
    # attached and caught up with the past before the live continuation starts
    await eventually(lambda: seen and seen[-1].seq == first[-1].seq, what="the past", interval=0)
    second = await collect(agent.run("more", principal="alice", run_id=run_id))
    await asyncio.wait_for(listener, 5)
    assert [e.seq for e in seen] == list(range(3, second[-1].seq + 1))
    assert seen[-len(second) :] == second


async def test_every_call_leaves_an_audit_row(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script(
        "audit",
        [
            ToolCalls(
                [
                    Call("balance"),
                    Call("nope"),
                    Call("send", {"to": "b", "amount": "2"}),
                    Call("send", {"to": "c", "amount": "90"}),
                ]
            ),
            Reply("ok"),
        ],
    )
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
    )
    events = await collect(agent.run("audit", principal="alice"))
    rows = await store.audit_records(events[0].run_id)
    outcomes = sorted((r.capability, r.outcome, r.tier or "") for r in rows)
    assert outcomes == [
        ("balance", "ok", "auto"),
        ("send", "ok", "auto"),
        ("send", "pending", "confirm"),
    ]
    (auto_send,) = [r for r in rows if r.outcome == "ok" and r.capability == "send"]
    assert auto_send.amount_usd == Decimal("2")
    assert auto_send.idempotency_key is not None
    assert auto_send.input == {"to": "b", "amount": "2", "memo": ""}


async def test_resume_all_picks_up_runs_left_running(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("crash", [ToolCalls([Call("balance")]), Reply("recovered")])
    never = asyncio.Event()

    @capability(kind="read")
    async def balance(account: str = "main") -> dict[str, str]:
        """The balance."""
        await never.wait()  # the caller goes away while it runs
        return {}

    toys = [c for c in toy_capabilities(effects) if c.name != "balance"]
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[*toys, balance],
        store=store,
        clock=clock,
        lease_seconds=5,
    )
    stream = agent.run("crash soon", principal="alice")
    first = [await anext(stream) for _ in range(2)]  # accepted: run_started, user_message
    await stream.aclose()  # the caller goes away mid-run: the run stays "running"
    run_id = first[0].run_id
    assert (await agent.get_run(run_id)).status == "running"
    clock.advance(10)  # any lease left behind has lapsed
    other = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
    )
    assert await other.resume_all() == [run_id]
    run = await other.get_run(run_id)
    assert run.status == "completed"
    log = await store.read_events(run_id)
    assert isinstance(log[-1], RunCompleted)
    assert log[-1].text == "recovered"
    assert [e.seq for e in log] == list(range(1, len(log) + 1))


async def test_following_a_quiet_run_polls_gently_and_stops_when_cancelled(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("hello", [Reply("hi")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
    )
    first = await collect(agent.run("hello", principal="alice"))
    reads = 0
    original = store.read_events

    ten_reads = asyncio.Event()

    async def counting(*args: object, **kwargs: object) -> list[Event]:
        nonlocal reads
        reads += 1
        if reads == 10:
            ten_reads.set()
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    store.read_events = counting  # type: ignore[method-assign]
    seen: list[Event] = []

    async def follow() -> None:
        async for event in agent.events(first[0].run_id, poll_seconds=0.01):
            seen.append(event)

    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(follow())
    async with asyncio.timeout(30):  # it polls: reads keep coming (however busy the machine)
        await ten_reads.wait()
    elapsed = loop.time() - started
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    assert [e.seq for e in seen] == [e.seq for e in first]
    # it does not spin: after the first read, each read waits poll_seconds (a lower bound,
    # which no load can break)
    assert elapsed >= (reads - 2) * 0.01, (reads, elapsed)


async def test_the_lease_is_renewed_while_a_long_call_runs(clock: ManualClock) -> None:
    renewed = asyncio.Event()

    class Watching(MemoryStore):
        renewals = 0

        async def renew(
            self, run_id: UUID, *, epoch: int, now: datetime, ttl_seconds: float
        ) -> bool:
            Watching.renewals += 1
            if Watching.renewals >= 2:
                renewed.set()
            return await super().renew(run_id, epoch=epoch, now=now, ttl_seconds=ttl_seconds)

    @capability(kind="read")
    async def slow() -> str:
        """Takes longer than the lease."""
        await asyncio.wait_for(renewed.wait(), 5)
        return "done"

    store = Watching()
    script = Script("slow", [ToolCalls([Call("slow")]), Reply("ok")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=[slow],
        store=store,
        clock=clock,
        lease_seconds=0.03,
    )
    events = await collect(agent.run("slow", principal="alice"))
    assert isinstance(events[-1], RunCompleted)
    assert Watching.renewals >= 2
    run = await store.get_run(events[0].run_id)
    assert run is not None
    assert run.lease_owner is None  # released at the end, and no renewal after that


async def test_resume_does_not_drive_a_run_finished_after_it_looked(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("hello", [Reply("hi")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
    )
    first = await collect(agent.run("hello", principal="alice"))
    run_id = first[0].run_id
    done = await store.get_run(run_id)
    assert done is not None
    assert done.status == "completed"

    # the first read says running, as it did a moment before another worker finished the run
    original = store.get_run

    async def stale_get_run(rid: UUID) -> Any:
        return done.with_(status="running")

    store.get_run = stale_get_run  # type: ignore[method-assign,assignment]
    try:
        more = await collect(agent.resume(run_id))
    finally:
        store.get_run = original  # type: ignore[method-assign]
    assert more == []  # the leased record says completed: nothing is driven
    log = await store.read_events(run_id)
    assert len(log) == len(first)


async def test_submit_records_a_run_for_workers_without_driving_it(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    script = Script("later", [Reply("done later")])
    agent = Agent(
        model=ScriptedModel([script]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
    )
    run = await agent.submit("later, please", principal="alice")
    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert (stored.status, stored.lease_owner) == ("running", None)  # claimable at once
    assert [e.type for e in await store.read_events(run.run_id)] == ["run_started", "user_message"]
    assert await agent.resume_all() == [run.run_id]
    assert (await agent.get_run(run.run_id)).status == "completed"


async def test_submit_continues_an_idle_run_for_workers(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    agent = Agent(
        model=ScriptedModel([Script("first", [Reply("one"), Reply("two")])]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
    )
    [event async for event in agent.run("first", principal="alice", run_id=None)]
    (done,) = await store.list_runs()
    with pytest.raises(RunError) as refused:
        await agent.submit("second", principal="mallory", run_id=done.run_id)
    assert refused.value.code == "forbidden"

    run = await agent.submit("second", principal="alice", run_id=done.run_id)
    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert (stored.status, stored.lease_owner, stored.last_seq) == ("running", None, run.last_seq)
    log = await store.read_events(run.run_id)
    assert log[-1].type == "user_message"
    assert log[-1].seq == run.last_seq
    with pytest.raises(RunError) as busy:  # claimable, not idle: a second message waits
        await agent.submit("third", principal="alice", run_id=run.run_id)
    assert busy.value.code == "busy"
    assert await agent.resume_all() == [run.run_id]
    final = await store.read_events(run.run_id)
    assert final[-1].type == "run_completed"
    reply = "".join(e.text for e in final[run.last_seq :] if isinstance(e, TextDelta))
    assert reply == "two"
