"""Agent.cancel: a run stopped for good, every open call closed, nothing executed after."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal

import pytest

from fiduciary import Agent, ApprovalError, ManualClock, RunError, capability
from fiduciary.events import ActionResolved, RunFailed, ToolCallEnd, ToolCallRejected, TurnRetracted
from fiduciary.models.base import ModelEvent, ModelRequest, StreamTextDelta
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, allow_all, collect

from .conftest import Effects, toy_capabilities

pytestmark = pytest.mark.timeout(30)


def agent_for(store: Store, clock: ManualClock, effects: Effects, *extra: object) -> Agent:
    scripts = [
        Script(
            "send 60", [ToolCalls([Call("send", {"to": "bob", "amount": "60"})]), Reply("Sent.")]
        ),
        Script("slow", [ToolCalls([Call("slow_write")]), Reply("done")]),
        Script("hello", [Reply("hi " * 50, chunk_chars=3)]),
    ]
    return Agent(
        model=ScriptedModel(scripts),
        capabilities=[*toy_capabilities(effects), *extra],  # type: ignore[list-item]
        store=store,
        clock=clock,
        authorize=allow_all,
    )


async def test_cancel_a_run_waiting_for_approval(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    agent = agent_for(store, clock, effects)
    events = await collect(agent.run("send 60 to bob", principal="alice"))
    run_id = events[0].run_id
    (pending,) = await agent.pending_approvals(run_id=run_id)
    with pytest.raises(RunError) as err:
        await agent.cancel(run_id, by="mallory")
    assert err.value.code == "forbidden"
    run = await agent.cancel(run_id, by="alice", reason="changed my mind")
    assert run.status == "cancelled"
    log = await store.read_events(run_id)
    tail = log[len(events) :]
    assert [e.type for e in tail] == ["action_resolved", "tool_call_rejected", "run_failed"]
    assert isinstance(tail[0], ActionResolved)
    assert tail[0].decision == "denied"
    assert isinstance(tail[1], ToolCallRejected)
    assert tail[1].reason == "cancelled"
    assert isinstance(tail[2], RunFailed)
    assert tail[2].reason == "aborted"
    assert tail[2].message == "cancelled by alice: changed my mind"
    with pytest.raises(ApprovalError) as aerr:
        await agent.approve(pending.approval_id, by="alice")
    assert aerr.value.code == "already_decided"
    assert await collect(agent.resume(run_id)) == []
    assert effects.payments == []
    with pytest.raises(RunError) as err:
        await agent.cancel(run_id, by="alice")
    assert err.value.code == "state"
    # the conversation may go on, like after a failure
    more = await collect(agent.run("hello again", principal="alice", run_id=run_id))
    assert more[-1].type == "run_completed"


async def test_an_approved_action_not_yet_run_never_runs(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    agent = agent_for(store, clock, effects)
    events = await collect(agent.run("send 60 to bob", principal="alice"))
    run_id = events[0].run_id
    (pending,) = await agent.pending_approvals(run_id=run_id)
    await agent.approve(pending.approval_id, by="alice")
    await agent.cancel(run_id, by="alice")
    tail = (await store.read_events(run_id))[len(events) :]
    assert isinstance(tail[0], ActionResolved)
    assert tail[0].decision == "approved"
    assert isinstance(tail[1], ToolCallRejected)
    assert tail[1].reason == "cancelled"
    assert effects.payments == []


class Stalling:
    """The scripted model, stalling for good after a few text deltas (a model mid-answer)."""

    def __init__(self, inner: ScriptedModel, after: int) -> None:
        self.inner = inner
        self.after = after

    @property
    def name(self) -> str:
        return "stalling"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        count = 0
        async for item in self.inner.stream(request):
            if isinstance(item, StreamTextDelta):
                count += 1
                if count > self.after:
                    await asyncio.Event().wait()
            yield item


async def test_cancel_mid_stream_retracts_the_partial_turn(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    agent = agent_for(store, clock, effects)
    assert isinstance(agent.model, ScriptedModel)
    agent = agent.with_options(model=Stalling(agent.model, after=3))
    stream = agent.run("hello", principal="alice")
    seen = [await anext(stream) for _ in range(5)]  # run_started, user_message, 3 deltas
    await stream.aclose()  # the drive stops; the lease is released
    run_id = seen[0].run_id
    await agent.cancel(run_id, by="alice")
    log = await store.read_events(run_id)
    retracted = [e for e in log if isinstance(e, TurnRetracted)]
    assert len(retracted) == 1
    assert log[-1].type == "run_failed"
    assert [e.seq for e in log] == list(range(1, len(log) + 1))


async def test_a_write_cancelled_while_running_ends_outcome_unknown(
    store: Store, clock: ManualClock, effects: Effects
) -> None:
    entered = asyncio.Event()

    @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(1))
    async def slow_write() -> dict[str, str]:
        """Takes a while."""
        entered.set()
        await asyncio.Event().wait()
        return {}

    agent = agent_for(store, clock, effects, slow_write)

    async def drive() -> None:
        async for _ in agent.run("slow please", principal="alice"):
            pass

    task = asyncio.create_task(drive())
    await asyncio.wait_for(entered.wait(), 10)
    run_id = (await store.list_runs(principal="alice"))[0].run_id
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await agent.cancel(run_id, by="alice")
    log = await store.read_events(run_id)
    (end,) = [e for e in log if isinstance(e, ToolCallEnd)]
    assert end.recovery == "unknown"
    assert end.error_code == "outcome_unknown"
    assert log[-1].type == "run_failed"
    assert (await agent.get_run(run_id)).status == "cancelled"
