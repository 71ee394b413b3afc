"""A run is resumed only by its own agent: its capabilities, and its model unless asked."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, ManualClock, PendingAction, RunCompleted, RunError
from fiduciary.events import Event
from fiduciary.stores.base import Store
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls, collect
from tests.agent_support import Effects, make_agent, toy_capabilities

ALICE = "alice"
PAY = Script(
    "pay carol",
    [ToolCalls([Call("send", {"to": "carol", "amount": "150"})]), Reply("paid")],
)


def paying_agent(
    effects: Effects, store: Store, clock: ManualClock, *, model: str = "scripted", **kw: Any
) -> Agent:
    capabilities = toy_capabilities(effects)
    if kw.pop("without_send", False):
        capabilities = [c for c in capabilities if c.name != "send"]
    return make_agent(
        effects,
        store,
        clock,
        model=ScriptedModel([PAY], name=model),
        capabilities=capabilities,
        **kw,
    )


async def approved_run(agent: Agent) -> UUID:
    """A run whose send was approved and waits to be resumed."""
    events = await collect(agent.run("pay carol", principal=ALICE))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    await agent.approve(pending.approval_id, by=ALICE)
    return events[0].run_id


async def snapshot(store: Store, run_id: UUID) -> tuple[Any, list[Event]]:
    run = await store.get_run(run_id)
    assert run is not None
    return (run.status, run.last_seq, run.epoch, run.lease_owner), await store.read_events(run_id)


async def test_an_agent_without_the_runs_capabilities_is_refused_and_changes_nothing(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    own = paying_agent(effects, store, clock)
    run_id = await approved_run(own)
    before = await snapshot(store, run_id)
    other = paying_agent(effects, store, clock, without_send=True)

    with pytest.raises(RunError) as refused:
        await collect(other.resume(run_id))

    assert refused.value.code == "agent_mismatch"
    assert "send" in refused.value.message
    assert await snapshot(store, run_id) == before  # not leased, not driven, not failed
    assert effects.payments == []
    done = await collect(own.resume(run_id))
    assert isinstance(done[-1], RunCompleted)
    assert [p["to"] for p in effects.payments] == ["carol"]


async def test_another_model_is_refused_unless_asked(
    effects: Effects, store: Store, clock: ManualClock
) -> None:
    run_id = await approved_run(paying_agent(effects, store, clock))
    before = await snapshot(store, run_id)
    other = paying_agent(effects, store, clock, model="openai:gpt-5.1")

    with pytest.raises(RunError) as refused:
        await collect(other.resume(run_id))

    assert refused.value.code == "agent_mismatch"
    assert "scripted" in refused.value.message
    assert "openai:gpt-5.1" in refused.value.message
    assert await snapshot(store, run_id) == before
    done = await collect(other.resume(run_id, any_model=True))
    assert isinstance(done[-1], RunCompleted)
    assert [p["to"] for p in effects.payments] == ["carol"]


async def test_resume_all_leaves_a_run_for_its_own_agent_and_says_so_once(
    effects: Effects, store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    own = paying_agent(effects, store, clock)
    record = await own.submit("pay carol", principal=ALICE)  # running, nobody leases it
    before = await snapshot(store, record.run_id)
    other = paying_agent(effects, store, clock, without_send=True)

    with caplog.at_level(logging.WARNING, logger="fiduciary.agent"):
        assert await other.resume_all() == []
        assert await other.resume_all() == []

    assert await snapshot(store, record.run_id) == before
    said = [r for r in caplog.records if str(record.run_id) in r.getMessage()]
    assert len(said) == 1
    assert "left for another agent" in said[0].getMessage()
    assert await own.resume_all() == [record.run_id]
    run = await store.get_run(record.run_id)
    assert run is not None
    assert run.status == "awaiting_approval"
