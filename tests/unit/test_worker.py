"""Workers on PostgreSQL, in one process: claim, drive, wake on decisions made elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from fiduciary import Agent, Policy
from fiduciary.events import Event, PendingAction, RunCompleted
from fiduciary.exceptions import ConfigurationError, RunError
from fiduciary.testing import Call, MemoryStore, Reply, Script, ToolCalls
from fiduciary.worker import run_worker, submit
from tests.agent_support import Effects, make_agent
from tests.postgres_support import open_stores, require_driver

pytestmark = pytest.mark.postgres

require_driver()
from fiduciary.stores.postgres import PostgresStore  # noqa: E402

TIMEOUT = 20.0

SCRIPT = Script(
    "pay",
    [
        ToolCalls([Call("balance")]),
        ToolCalls(
            [Call("send", lambda r: {"to": r.user_messages[0].split()[-1], "amount": "120"})]
        ),
        Reply("paid"),
    ],
)


def worker_agent(store: Any, effects: Effects) -> Agent:
    return make_agent(
        effects,
        store,
        None,
        SCRIPT,
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        lease_seconds=5.0,
    )


@pytest.fixture
async def stores(postgres_dsn: str) -> AsyncIterator[list[PostgresStore]]:
    """Three stores on one database: two workers' and one server's."""
    async with open_stores(3, postgres_dsn) as opened:
        yield opened


async def until_completed(server: Agent, run_id: UUID) -> list[Event]:
    """Follow a run from the server until it completes, approving what it asks (live)."""
    seen: list[Event] = []
    async for event in server.events(run_id, poll_seconds=3600):  # no polling: LISTEN only
        seen.append(event)
        if isinstance(event, PendingAction):
            await server.approve(event.approval_id, by="alice")
        if isinstance(event, RunCompleted):
            return seen
    raise AssertionError("the stream ended before the run completed")


async def test_workers_drive_submitted_runs_and_wake_on_approvals_made_elsewhere(
    stores: list[PostgresStore],
) -> None:
    effects = Effects()
    workers = [worker_agent(s, effects) for s in stores[:2]]
    server = worker_agent(stores[2], effects)
    stop = asyncio.Event()
    running = [
        asyncio.create_task(run_worker(w, stop=stop, poll_interval=3600, concurrency=4))
        for w in workers
    ]
    try:
        runs = [await submit(server, f"pay {name}", principal="alice") for name in "abcdefgh"]
        async with asyncio.timeout(TIMEOUT):
            logs = await asyncio.gather(*(until_completed(server, r.run_id) for r in runs))
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(*running)

    assert sorted(p["to"] for p in effects.payments) == list("abcdefgh")
    assert len(set(effects.entries)) == len(effects.entries) == 8
    for run, log in zip(runs, logs, strict=True):
        stored = await server.store.read_events(run.run_id)
        assert log == stored  # followed live from another instance: nothing lost or repeated
        assert (await server.get_run(run.run_id)).status == "completed"
    # the runs went through several holders: submit, a worker, a worker after the approval
    owners = {r.lease_owner for r in await server.store.list_runs()}
    assert owners == {None}


async def test_a_worker_stops_when_asked(stores: list[PostgresStore]) -> None:
    agent = worker_agent(stores[0], Effects())
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(agent, stop=stop, poll_interval=3600))
    await asyncio.sleep(0)  # not a wait: one pass of the loop lets the worker start claiming

    stop.set()

    async with asyncio.timeout(TIMEOUT):
        await task


async def test_a_worker_needs_a_store_that_hands_out_work() -> None:
    agent = worker_agent(MemoryStore(), Effects())
    with pytest.raises(ConfigurationError):
        await run_worker(agent, stop=asyncio.Event())


async def test_a_worker_owner_must_be_its_agents(stores: list[PostgresStore]) -> None:
    agent = worker_agent(stores[0], Effects())
    with pytest.raises(ConfigurationError):
        await run_worker(agent, stop=asyncio.Event(), owner="someone-else")


async def test_resume_drives_under_a_claim_without_leasing_again(
    stores: list[PostgresStore],
) -> None:
    effects = Effects()
    server, worker, other = (worker_agent(s, effects) for s in stores)
    run = await submit(server, "pay dave", principal="alice")
    (claimed,) = await stores[1].claim_runnable(
        owner=worker.owner, now=worker.clock.now(), ttl_seconds=5.0
    )
    with pytest.raises(RunError) as refused:  # a claim is only good for the agent holding it
        async for _ in other.resume(run.run_id, claimed=claimed):
            pass
    assert refused.value.code == "busy"
    events = [e async for e in worker.resume(run.run_id, claimed=claimed)]
    assert isinstance(events[-1], PendingAction)  # driven up to the approval, same epoch
    after = await server.get_run(run.run_id)
    assert (after.epoch, after.lease_owner, after.status) == (
        claimed.epoch,
        None,
        "awaiting_approval",
    )


async def test_a_claim_that_lapsed_before_its_drive_started_is_not_driven(
    stores: list[PostgresStore],
) -> None:
    """A starved worker whose claim lapsed and was taken over never calls the model for it."""
    from fiduciary.worker import _drive

    effects = Effects()
    server, slow, fast = (worker_agent(s, effects) for s in stores)
    run = await submit(server, "pay erin", principal="alice")
    (stale,) = await stores[1].claim_runnable(
        owner=slow.owner, now=slow.clock.now(), ttl_seconds=0.01
    )
    later = fast.clock.now() + timedelta(seconds=1)  # the stale claim has lapsed by then
    (taken,) = await stores[2].claim_runnable(owner=fast.owner, now=later, ttl_seconds=5.0)
    assert taken.epoch > stale.epoch

    await _drive(slow, stale)

    assert len(slow.model.requests) == 0  # type: ignore[attr-defined]
    after = await server.get_run(run.run_id)
    assert (after.lease_owner, after.epoch) == (fast.owner, taken.epoch)  # left alone
    assert [e.type for e in await server.store.read_events(run.run_id)] == [
        "run_started",
        "user_message",
    ]


async def test_a_run_released_while_its_claim_excluded_it_is_claimed_without_another_wake_up(
    stores: list[PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wake-up a worker could lose: a drive suspends for an approval that is decided before
    its lease is released; the release notifies the workers; the worker, woken, claims at once
    — excluding the run, which it still drives — and the drive ends during that claim. That
    notification was the only one: the worker must claim the run once its drive has ended, not
    wait for its poll. The interleaving is forced here; on a busy machine it happens by itself."""
    effects = Effects()
    server = worker_agent(stores[2], effects)
    worker = worker_agent(stores[0], effects)
    queue = stores[0]
    before_release: int | None = None  # the work generation before the run's release
    claiming = asyncio.Event()  # a claim that excludes the run has started since its release

    def drive_of(run_id: UUID) -> asyncio.Task[Any] | None:
        name = f"fiduciary-run-{run_id}"
        return next((t for t in asyncio.all_tasks() if t.get_name() == name), None)

    real_claim, real_release = queue.claim_runnable, queue.release

    async def claim_runnable(**kw: Any) -> list[Any]:
        # the worker reads the generation just before it claims: past before_release, it was
        # woken by the release's notification (or after it)
        woken = before_release is not None and queue.work_generation > before_release
        for run_id in kw.get("exclude", ()):
            drive = drive_of(run_id)
            if woken and drive is not None and not drive.done():
                claiming.set()
                await asyncio.wait({drive})  # the drive ends during this claim
        return await real_claim(**kw)

    async def release(run_id: UUID, *, epoch: int) -> None:
        nonlocal before_release
        held = await queue.get_run(run_id)
        if before_release is not None or held is None or held.status != "awaiting_approval":
            await real_release(run_id, epoch=epoch)
            return
        (pending,) = await server.store.list_approvals(status="pending")
        await server.approve(pending.approval_id, by="alice")  # decided while still leased
        before_release = queue.work_generation
        await real_release(run_id, epoch=epoch)  # notifies: the run is claimable
        await claiming.wait()  # the drive ends only once the worker, woken, is claiming

    monkeypatch.setattr(queue, "claim_runnable", claim_runnable)
    monkeypatch.setattr(queue, "release", release)
    stop = asyncio.Event()
    working = asyncio.create_task(run_worker(worker, stop=stop, poll_interval=3600))
    try:
        run = await submit(server, "pay frank", principal="alice")
        async with asyncio.timeout(TIMEOUT):
            async for event in server.events(run.run_id, poll_seconds=0.1):
                if isinstance(event, RunCompleted):
                    break
    finally:
        stop.set()
        async with asyncio.timeout(TIMEOUT):
            await working
    assert claiming.is_set()
    assert [p["to"] for p in effects.payments] == ["frank"]
