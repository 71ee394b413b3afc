"""Ledger fencing: a worker whose run was taken over never starts a side effect.

A worker paused after its last commit (here: inside the ``authorize`` callback, between the
admission of a write and its execution) has nothing left to commit before it begins the write,
so only the ledger can refuse it: ``ledger_begin`` carries the lease epoch and is refused with
``StaleEpochError`` once another holder has the run.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, CallContext, ToolCallEnd, capability
from fiduciary.events import TurnComplete
from fiduciary.gates import AuthorizationRequest
from fiduciary.stores.base import Store
from fiduciary.testing import Call, ManualClock, Reply, Script, ScriptedModel, ToolCalls, collect

TIMEOUT = 5.0
KEY = "alice:invoice:INV-7"


async def turn_committed(store: Store, run_id: UUID) -> None:
    """Until the turn's events reach the store (within the run's commit delay)."""
    sub = store.subscribe(run_id)
    try:
        if any(isinstance(e, TurnComplete) for e in await store.read_events(run_id)):
            return
        async for event in sub:
            if isinstance(event, TurnComplete):
                return
    finally:
        sub.close()


async def test_a_write_is_never_started_by_a_worker_whose_run_was_taken_over(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    entries: list[str] = []
    admitting, resume_admission = asyncio.Event(), asyncio.Event()
    asked = 0
    run_ids: list[UUID] = []

    async def authorize(request: AuthorizationRequest) -> bool:
        nonlocal asked
        asked += 1
        if asked == 1:  # the first worker pauses here, after its last commit
            run_ids.append(request.run_id)
            admitting.set()
            await resume_admission.wait()
        return True

    @capability(
        kind="execute",
        tier="auto",
        idempotency_key=lambda args, ctx: f"invoice:{args.invoice}",
    )
    async def pay(invoice: str, ctx: CallContext) -> dict[str, Any]:
        """Pay an invoice."""
        entries.append(ctx.idempotency_key)
        return {"paid": invoice}

    def agent() -> Agent:
        script = Script("pay", [ToolCalls([Call("pay", {"invoice": "INV-7"})]), Reply("paid")])
        return Agent(
            model=ScriptedModel([script]),
            capabilities=[pay],
            store=store,
            clock=clock,
            authorize=authorize,
        )

    first = agent()
    drive = asyncio.create_task(collect(first.run("pay INV-7", principal="alice")))
    async with asyncio.timeout(TIMEOUT):
        await admitting.wait()
        await turn_committed(store, run_ids[0])
    run = await store.get_run(run_ids[0])
    assert run is not None
    # the first worker's lease lapses (it is paused) and another worker takes the run over
    clock.advance(first.lease_seconds + 1)
    taken = await store.acquire(run.run_id, owner="worker-2", now=clock.now(), ttl_seconds=60)
    assert taken is not None
    assert taken.epoch > run.epoch
    logged_before = await store.read_events(run.run_id)

    with caplog.at_level(logging.WARNING, logger="fiduciary.loop"):
        resume_admission.set()  # the first worker wakes up and goes on with the write
        async with asyncio.timeout(TIMEOUT):
            seen = await drive

    # refused at ledger_begin: the handler was not entered and nothing was written
    assert entries == []
    assert await store.ledger_get(KEY) is None
    assert await store.read_events(run.run_id) == logged_before
    assert isinstance(logged_before[-1], TurnComplete)
    assert not any(isinstance(e, ToolCallEnd) for e in seen)
    assert "taken over" in caplog.text  # the drive stopped as for a refused commit
    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert (stored.epoch, stored.lease_owner) == (taken.epoch, "worker-2")

    # the new holder settles the call: the write runs once, by the holder of the run
    await store.release(run.run_id, epoch=taken.epoch)
    resumed = await collect(agent().resume(run.run_id))
    assert entries == [KEY]
    end = next(e for e in resumed if isinstance(e, ToolCallEnd))
    assert not end.is_error
    entry = await store.ledger_get(KEY)
    assert entry is not None
    assert entry.status == "done"
