"""The server's sweep: while it runs, every run that can make progress and that nobody drives
is driven again — not only at start-up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary import Agent, PendingAction
from fiduciary.exceptions import ConfigurationError
from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
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

from ..conftest import Effects, toy_capabilities

TIMEOUT = 30.0  # catches a hang, never slowness
PAY = Script(
    "pay",
    [ToolCalls([Call("send", {"to": "carol", "amount": "150"})]), Reply("paid")],
)


def make_agent(store: Store, clock: ManualClock, effects: Effects) -> Agent:
    return Agent(
        model=ScriptedModel([PAY]),
        capabilities=toy_capabilities(effects),
        store=store,
        clock=clock,
        authorize=allow_all,
    )


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
    agent = make_agent(served, clock, effects)
    app = create_app(agent, keys=MemoryKeyStore(clock=clock), sweep_seconds=0.01)
    async with app.router.lifespan_context(app):
        events = await collect(agent.run("pay carol", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        run_id = events[0].run_id

        await make_agent(other, clock, Effects()).approve(pending.approval_id, by="alice")

        await wait_for_event(agent, run_id, "run_completed")
    assert len(effects.entries) == 1


async def test_a_restarted_server_takes_up_its_old_runs_once_their_leases_lapse(
    stores: tuple[SQLiteStore, SQLiteStore], clock: ManualClock
) -> None:
    """The server died holding the run and came back before the lease lapsed: nothing is found
    at start-up; the sweep finds the run after the lapse."""
    served, _ = stores
    agent = make_agent(served, clock, Effects())
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
    agent = make_agent(MemoryStore(), clock, Effects())
    with pytest.raises(ConfigurationError):
        create_app(agent, keys=MemoryKeyStore(clock=clock), sweep_seconds=0)
