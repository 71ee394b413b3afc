"""``Agent.resume_all``: "nothing to do" and "the store failed" are told apart."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from uuid import UUID

import pytest

from fiduciary import StoreError, StoreUnavailableError
from fiduciary.stores.base import RunRecord
from fiduciary.testing import Call, ManualClock, MemoryStore, Reply, Script, ToolCalls, collect

from .conftest import Effects, make_agent


class FailingStore(MemoryStore):
    """A MemoryStore whose leases (or listing) fail while ``failing`` says so."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    async def acquire(
        self, run_id: UUID, *, owner: str, now: datetime, ttl_seconds: float
    ) -> RunRecord | None:
        if "acquire" in self.failing:
            raise StoreError("the database is locked")
        return await super().acquire(run_id, owner=owner, now=now, ttl_seconds=ttl_seconds)

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        if "list" in self.failing:
            raise StoreError("the database is gone")
        return await super().runs_to_resume(now=now, limit=limit)


SEND = Script("pay bob", [ToolCalls([Call("send", {"to": "bob", "amount": "20"})]), Reply("sent")])


async def test_nothing_to_do_is_an_empty_list(effects: Effects, clock: ManualClock) -> None:
    agent = make_agent(effects, FailingStore(), clock, SEND)
    assert await agent.resume_all() == []


async def test_a_store_that_fails_for_every_run_raises_and_leaves_the_runs(
    effects: Effects, clock: ManualClock
) -> None:
    store = FailingStore()
    agent = make_agent(effects, store, clock, SEND)
    events = await collect(agent.run("pay bob", principal="alice"))
    run_id = events[0].run_id
    (approval,) = await agent.pending_approvals(run_id=run_id)
    await agent.approve(approval.approval_id, by="alice")
    store.failing.add("acquire")
    with pytest.raises(StoreUnavailableError) as raised:
        await agent.resume_all()
    assert raised.value.failed == (run_id,)
    assert raised.value.resumed == ()
    assert "the store failed for 1 of 1 runs to resume" in raised.value.message
    assert effects.payments == []
    assert (await agent.get_run(run_id)).status == "awaiting_approval"
    store.failing.clear()  # the store is back: the same call moves the run
    assert await agent.resume_all() == [run_id]
    assert effects.payments == [{"to": "bob", "amount": Decimal("20"), "memo": ""}]


async def test_a_store_that_cannot_list_the_runs_raises(
    effects: Effects, clock: ManualClock
) -> None:
    store = FailingStore()
    store.failing.add("list")
    agent = make_agent(effects, store, clock, SEND)
    with pytest.raises(StoreUnavailableError, match="could not be listed: the database is gone"):
        await agent.resume_all()
