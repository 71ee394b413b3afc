"""The server's sweep: while it runs, every run that can make progress and that nobody drives
is driven again — not only at start-up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary import Agent, Event, PendingAction
from fiduciary.exceptions import ConfigurationError
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.base import RunRecord, Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import (
    Call,
    ManualClock,
    MemoryStore,
    Reply,
    Script,
    ToolCalls,
    collect,
)
from tests.agent_support import Effects, make_agent, toy_capabilities

TIMEOUT = 30.0  # catches a hang, never slowness
PAY = Script(
    "pay",
    [ToolCalls([Call("send", {"to": "carol", "amount": "150"})]), Reply("paid")],
)


def paying_agent(store: Store, clock: ManualClock, effects: Effects) -> Agent:
    return make_agent(effects, store, clock, PAY)


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[SQLiteStore, SQLiteStore]]:
    """Two processes' stores on one SQLite file."""
    path = tmp_path / "runs.sqlite3"
    served, other = await SQLiteStore.open(path), await SQLiteStore.open(path)
    yield served, other
    await served.close()
    await other.close()


async def wait_for_event(agent: Agent, run_id: UUID, kind: str) -> None:
    """Follow the run's log (as another process would see it) until an event of ``kind``."""
    async with asyncio.timeout(TIMEOUT):
        async for event in agent.events(run_id, poll_seconds=0.01):
            if event.type == kind:
                return


async def test_a_decision_made_by_another_process_is_driven_by_the_server(
    stores: tuple[SQLiteStore, SQLiteStore], clock: ManualClock
) -> None:
    """As ``fiduciary approvals approve`` on the file ``fiduciary serve`` serves."""
    served, other = stores
    effects = Effects()
    agent = paying_agent(served, clock, effects)
    app = create_app(agent, keys=MemoryKeyStore(clock=clock), sweep_seconds=0.01)
    async with app.router.lifespan_context(app):
        events = await collect(agent.run("pay carol", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        run_id = events[0].run_id

        await paying_agent(other, clock, Effects()).approve(pending.approval_id, by="alice")

        await wait_for_event(agent, run_id, "run_completed")
    assert len(effects.entries) == 1


async def test_a_restarted_server_takes_up_its_old_runs_once_their_leases_lapse(
    stores: tuple[SQLiteStore, SQLiteStore], clock: ManualClock
) -> None:
    """The server died holding the run and came back before the lease lapsed: nothing is found
    at start-up; the sweep finds the run after the lapse."""
    served, _ = stores
    agent = paying_agent(served, clock, Effects())
    run = await agent.submit("pay carol", principal="alice")
    old = await served.acquire(run.run_id, owner="before-restart", now=clock.now(), ttl_seconds=30)
    assert old is not None
    app = create_app(agent, keys=MemoryKeyStore(clock=clock), sweep_seconds=0.01)
    async with app.router.lifespan_context(app):
        clock.advance(31)
        await wait_for_event(agent, run.run_id, "pending_action")
    taken = await served.get_run(run.run_id)
    assert taken is not None
    assert taken.epoch > old.epoch


def test_the_sweep_period_must_be_positive(clock: ManualClock) -> None:
    agent = paying_agent(MemoryStore(), clock, Effects())
    with pytest.raises(ConfigurationError):
        create_app(agent, keys=MemoryKeyStore(clock=clock), sweep_seconds=0)


class _CountingStore(MemoryStore):
    """Counts the sweeps (``runs_to_resume``) and the first-event reads a resume's agent
    check makes, so a test can wait for sweeps instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.sweeps = 0
        self.checks = 0
        self.swept = asyncio.Event()

    async def runs_to_resume(self, *, now: datetime, limit: int = 100) -> list[RunRecord]:
        self.sweeps += 1
        if self.sweeps >= 10:
            self.swept.set()
        return await super().runs_to_resume(now=now, limit=limit)

    async def read_events(
        self, run_id: UUID, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        if limit == 1:
            self.checks += 1
        return await super().read_events(run_id, after_seq=after_seq, limit=limit)


async def test_the_sweep_tries_another_agents_run_once(clock: ManualClock) -> None:
    """A run this server's agent may not drive (it lacks the run's capabilities) is left for
    its own agent: refused once, then skipped, not retried and logged every period."""
    store = _CountingStore()
    effects = Effects()
    run = await paying_agent(store, clock, effects).submit("pay carol", principal="alice")
    other = make_agent(
        effects,
        store,
        clock,
        PAY,
        capabilities=[c for c in toy_capabilities(effects) if c.name != "send"],
    )
    app = create_app(other, keys=MemoryKeyStore(clock=clock), sweep_seconds=0.01)
    async with app.router.lifespan_context(app), asyncio.timeout(TIMEOUT):
        await store.swept.wait()
    assert other.leaves_alone(run.run_id)
    assert store.checks == 1
    left = await store.get_run(run.run_id)
    assert left is not None
    assert (left.status, left.last_seq, left.lease_owner) == ("running", run.last_seq, None)
    assert effects.entries == []
