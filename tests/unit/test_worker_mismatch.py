"""A worker whose agent is not a run's own leaves the run alone, and does not claim it again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from datetime import datetime
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, PendingAction, Policy
from fiduciary.stores.base import RunRecord
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.worker import run_worker, submit
from tests.agent_support import Effects, make_agent, toy_capabilities
from tests.postgres_support import open_stores, require_driver

pytestmark = pytest.mark.postgres

require_driver()
from fiduciary.stores.postgres import PostgresStore  # noqa: E402

TIMEOUT = 20.0
PAY = Script("pay", [ToolCalls([Call("send", {"to": "carol", "amount": "5"})]), Reply("paid")])


def worker_agent(store: Any, effects: Effects, *, without_send: bool = False) -> Agent:
    capabilities = [c for c in toy_capabilities(effects) if not (without_send and c.name == "send")]
    return make_agent(
        effects,
        store,
        None,
        PAY,
        capabilities=capabilities,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        lease_seconds=5.0,
    )


@pytest.fixture
async def stores() -> AsyncIterator[list[PostgresStore]]:
    async with open_stores(2) as opened:
        yield opened


class Claims:
    """Counts a store's claims, and the runs each handed out."""

    def __init__(self, store: PostgresStore) -> None:
        self.calls = 0
        self.handed: list[UUID] = []
        self.more = asyncio.Event()
        self._claim = store.claim_runnable

    async def __call__(
        self,
        *,
        owner: str,
        now: datetime,
        ttl_seconds: float,
        limit: int = 1,
        exclude: Collection[UUID] = (),
    ) -> list[RunRecord]:
        runs = await self._claim(
            owner=owner, now=now, ttl_seconds=ttl_seconds, limit=limit, exclude=exclude
        )
        self.calls += 1
        self.handed += [r.run_id for r in runs]
        self.more.set()
        return runs

    async def until(self, calls: int) -> None:
        while self.calls < calls:
            self.more.clear()
            await self.more.wait()


async def test_a_run_refused_by_a_workers_agent_is_left_for_its_own(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    effects = Effects()
    wrong = worker_agent(stores[0], effects, without_send=True)
    claims = Claims(stores[0])
    monkeypatch.setattr(stores[0], "claim_runnable", claims)
    record = await submit(worker_agent(stores[1], effects), "pay carol", principal="alice")
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(wrong, stop=stop, poll_interval=0.05))
    try:
        async with asyncio.timeout(TIMEOUT):
            await claims.until(calls=8)  # it polled on, well after it claimed the run
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await worker

    assert claims.handed == [record.run_id]  # claimed once, refused, never claimed again
    run = await stores[1].get_run(record.run_id)
    assert run is not None
    assert (run.status, run.last_seq, run.lease_owner) == ("running", 2, None)
    assert effects.payments == []
    own = worker_agent(stores[1], effects)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(own, stop=stop, poll_interval=0.05))
    try:
        async with asyncio.timeout(TIMEOUT):
            async for event in own.events(record.run_id):
                if event.type == "run_completed":
                    break
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await worker
    assert [p["to"] for p in effects.payments] == ["carol"]


BIG = Script("big", [ToolCalls([Call("send", {"to": "dave", "amount": "150"})]), Reply("paid")])


async def test_a_decided_run_refused_by_one_worker_is_driven_by_its_own(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approval decided while a worker with the wrong agent runs: that worker claims the run,
    refuses it, and the run's own agent's worker must still get it."""
    effects = Effects()
    own = worker_agent(stores[1], effects).with_options(model=ScriptedModel([BIG]))
    events = [e async for e in own.run("big", principal="alice")]
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    run_id = events[0].run_id
    wrong = worker_agent(stores[0], effects, without_send=True)
    claims = Claims(stores[0])
    monkeypatch.setattr(stores[0], "claim_runnable", claims)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(wrong, stop=stop, poll_interval=0.05))
    try:
        await own.approve(pending.approval_id, by="alice")
        async with asyncio.timeout(TIMEOUT):
            while run_id not in claims.handed:
                await claims.until(calls=claims.calls + 1)
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await worker

    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(own, stop=stop, poll_interval=0.05))
    try:
        async with asyncio.timeout(TIMEOUT):
            async for event in own.events(run_id):
                if event.type == "run_completed":
                    break
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await worker
    assert [p["to"] for p in effects.payments] == ["dave"]
