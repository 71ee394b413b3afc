"""Liveness in one process: a failing store reaches the caller, and the sweep
(``Agent.keep_runs_moving``) drives every run that can make progress — left by a dead process,
or decided in another process on the same SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, PendingAction, RunCompleted
from fiduciary.events import Event
from fiduciary.exceptions import StoreError
from fiduciary.stores.base import ApprovalRecord, AuditRecord, LedgerEntry, RunStatus, Store
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
from tests.agent_support import Effects, make_agent

ALICE = "alice"
TIMEOUT = 30.0  # catches a hang, never slowness

PAY = Script(
    "pay",
    [
        ToolCalls([Call("balance")]),
        ToolCalls([Call("send", {"to": "carol", "amount": "150"})]),
        Reply("paid"),
    ],
)


def paying_agent(effects: Effects, store: Store, clock: ManualClock, **kwargs: Any) -> Agent:
    return make_agent(effects, store, clock, PAY, **kwargs)


class DiskFull(MemoryStore):
    """Commits fail, once ``full``, as they would on a full disk: nothing of them is written."""

    full = False
    armed = True

    async def commit(
        self,
        run_id: UUID,
        *,
        epoch: int,
        events: Sequence[Event] = (),
        status: RunStatus | None = None,
        approvals: Sequence[ApprovalRecord] = (),
        audit: Sequence[AuditRecord] = (),
        release: bool = False,
        ledger_begin: LedgerEntry | None = None,
    ) -> LedgerEntry | None:
        if self.armed and approvals:  # the disk fills as the first approval is written
            self.full, self.armed = True, False
        if self.full:
            raise StoreError("database or disk is full")
        return await super().commit(
            run_id,
            epoch=epoch,
            events=events,
            status=status,
            approvals=approvals,
            audit=audit,
            release=release,
            ledger_begin=ledger_begin,
        )


async def wait_for_event(agent: Agent, run_id: UUID, kind: str) -> None:
    """Follow the run's log (as another process would see it) until an event of ``kind``."""
    async with asyncio.timeout(TIMEOUT):
        async for event in agent.events(run_id, poll_seconds=0.01):
            if event.type == kind:
                return


async def test_a_failing_store_is_raised_to_the_caller_after_the_lease_is_released(
    effects: Effects, clock: ManualClock
) -> None:
    store = DiskFull()
    agent = paying_agent(effects, store, clock)
    seen: list[Event] = []

    async def drain() -> None:
        async for event in agent.run("pay carol", principal=ALICE):
            seen.append(event)

    with pytest.raises(StoreError, match="disk is full"):
        await drain()

    run_id = seen[0].run_id
    run = await agent.get_run(run_id)
    assert (run.status, run.lease_owner) == ("running", None)  # released, not ended
    assert await store.read_events(run_id) == seen  # every event seen is committed
    assert [r.run_id for r in await store.runs_to_resume(now=clock.now())] == [run_id]

    store.full = False  # space is freed: the run is resumed, nothing lost or repeated
    more = await collect(agent.resume(run_id))
    pending = [e for e in more if isinstance(e, PendingAction)]
    await agent.approve(pending[0].approval_id, by=ALICE)
    more += await collect(agent.resume(run_id))
    assert isinstance(more[-1], RunCompleted)
    log = await store.read_events(run_id)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert len(effects.entries) == 1


async def test_keep_runs_moving_drives_a_run_approved_in_another_process(
    effects: Effects, tmp_path: Path, clock: ManualClock
) -> None:
    """Two stores on one SQLite file are two processes: the serving one is never told of the
    decision; its sweep finds it."""
    path = tmp_path / "runs.sqlite3"
    serving, deciding = await SQLiteStore.open(path), await SQLiteStore.open(path)
    agent = paying_agent(effects, serving, clock)
    person = paying_agent(Effects(), deciding, clock)
    sweeper = asyncio.create_task(agent.keep_runs_moving(every=0.01))
    try:
        events = await collect(agent.run("pay carol", principal=ALICE))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        run_id = events[0].run_id
        assert (await agent.get_run(run_id)).status == "awaiting_approval"

        await person.approve(pending.approval_id, by=ALICE)

        await wait_for_event(agent, run_id, "run_completed")
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        await serving.close()
        await deciding.close()
    assert len(effects.entries) == 1


async def test_keep_runs_moving_takes_over_a_dead_processs_run_once_its_lease_lapses(
    effects: Effects, clock: ManualClock
) -> None:
    store = MemoryStore()
    agent = paying_agent(effects, store, clock, lease_seconds=30)
    run = await agent.submit("pay carol", principal=ALICE)
    dead = await store.acquire(run.run_id, owner="dead", now=clock.now(), ttl_seconds=30)
    assert dead is not None  # a process took the run, and died with its lease live
    assert await store.runs_to_resume(now=clock.now()) == []  # the lease is the fence

    sweeper = asyncio.create_task(agent.keep_runs_moving(every=0.01))
    try:
        clock.advance(31)
        await wait_for_event(agent, run.run_id, "pending_action")
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
    taken = await store.get_run(run.run_id)
    assert taken is not None
    assert taken.epoch > dead.epoch
