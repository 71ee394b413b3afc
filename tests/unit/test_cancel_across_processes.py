"""Cancelling a run that another process drives, on PostgreSQL (cancel requests).

Each process has its own ``PostgresStore`` (its own pool and LISTEN connection), as separate
processes would: a request sent through one reaches the worker or server holding the lease
only through the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest

from fiduciary import Agent, CallContext, Policy, capability
from fiduciary.capabilities import Capability
from fiduciary.events import RunCompleted, RunFailed
from fiduciary.exceptions import RunError
from fiduciary.server import MemoryKeyStore, RateLimit, create_app
from fiduciary.stores.base import CancelRequest, RunRecord
from fiduciary.testing import Call, Reply, Script, ScriptedModel, ToolCalls
from fiduciary.worker import run_worker, submit
from tests.agent_support import make_agent
from tests.postgres_support import open_stores, require_driver
from tests.waiting import eventually

from .server.conftest import bearer, client_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

require_driver()
from fiduciary.stores.postgres import PostgresStore  # noqa: E402

TIMEOUT = 20.0

SCRIPT = Script(
    "pay",
    [
        ToolCalls([Call("balance")]),
        ToolCalls([Call("send", {"to": "bob", "amount": "5"})]),
        Reply("paid"),
    ],
)


class Bank:
    """A read that waits until released, and a write that must never run once cancelled."""

    def __init__(self) -> None:
        self.reading = asyncio.Event()
        self.release = asyncio.Event()
        self.reads = 0
        self.sent: list[str] = []

    def capabilities(self) -> list[Capability]:
        @capability(kind="read")
        async def balance() -> dict[str, str]:
            """The balance."""
            self.reads += 1
            self.reading.set()
            await self.release.wait()
            return {"usd": "100.00"}

        @capability(kind="execute", operation="send", amount_usd=lambda a, c: Decimal(a.amount))
        async def send(to: str, amount: str, ctx: CallContext) -> dict[str, str]:
            """Send money."""
            self.sent.append(ctx.idempotency_key)
            return {"to": to}

        return [balance, send]


def banking_agent(store: Any, bank: Bank, *, lease_seconds: float = 60.0) -> Agent:
    return make_agent(
        store=store,
        model=ScriptedModel([SCRIPT]),
        capabilities=bank.capabilities(),
        policy=Policy(preset="balanced", daily_autonomous_limit_usd=None),
        lease_seconds=lease_seconds,
    )


@pytest.fixture
async def stores() -> AsyncIterator[list[PostgresStore]]:
    async with open_stores(3) as opened:
        yield opened


async def ended_cancelled(store: PostgresStore, run_id: UUID) -> RunFailed:
    log = await store.read_events(run_id)
    last = log[-1]
    assert isinstance(last, RunFailed)
    assert last.reason == "aborted"
    return last


async def test_a_run_a_worker_drives_is_cancelled_from_another_process(
    stores: list[PostgresStore],
) -> None:
    bank = Bank()
    # a lease of a minute: the run can only end within the wait if the worker itself stops it
    worker = banking_agent(stores[1], bank)
    front = banking_agent(stores[0], bank)
    stop = asyncio.Event()
    working = asyncio.create_task(run_worker(worker, stop=stop, poll_interval=3600))
    try:
        run = await submit(front, "pay bob", principal="alice")
        async with asyncio.timeout(TIMEOUT):
            await bank.reading.wait()  # the worker is inside the read
        held = await front.get_run(run.run_id)
        assert held.lease_owner == worker.owner

        with pytest.raises(RunError) as refused:  # only the run's principal (or an admin)
            await front.cancel(run.run_id, by="mallory", wait_seconds=1)
        assert refused.value.code == "forbidden"
        cancelled = await front.cancel(
            run.run_id, by="alice", reason="changed my mind", wait_seconds=TIMEOUT
        )
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await working

    assert cancelled.status == "cancelled"
    ended = await ended_cancelled(stores[0], run.run_id)
    assert "changed my mind" in ended.message
    assert bank.sent == []  # the write after the read never ran
    # the worker released the run (the cancel may return between its commit and its release;
    # the worker has stopped now) and did not take it up again after it stopped its drive
    after = await front.get_run(run.run_id)
    assert (after.status, after.lease_owner) == ("cancelled", None)


async def test_a_dead_holders_lease_lapses_and_the_run_is_cancelled_here(
    stores: list[PostgresStore],
) -> None:
    bank = Bank()
    front = banking_agent(stores[0], bank, lease_seconds=1.0)
    run = await submit(front, "pay bob", principal="alice")
    # a worker claims the run and dies: nobody answers the request
    (claimed,) = await stores[1].claim_runnable(
        owner="dead-worker", now=front.clock.now(), ttl_seconds=1.0
    )
    with pytest.raises(RunError) as busy:  # asked not to wait for the lapse
        await front.cancel(run.run_id, by="alice", wait_seconds=0.2)
    assert busy.value.code == "busy"

    cancelled = await front.cancel(run.run_id, by="alice")  # waits lease_seconds + 1 at most

    assert cancelled.status == "cancelled"
    assert cancelled.epoch > claimed.epoch
    await ended_cancelled(stores[0], run.run_id)


async def test_a_run_a_server_drives_is_cancelled_through_another_server(
    stores: list[PostgresStore],
) -> None:
    """Server A drives the run itself (drive=True); the cancel arrives through server B."""
    bank = Bank()
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read"])
    apps = [
        create_app(
            banking_agent(store, bank), keys=keys, rate_limit=RateLimit(100, 60), drive=drive
        )
        for store, drive in ((stores[0], True), (stores[1], False))
    ]
    try:
        async with client_for(apps[0]) as a, client_for(apps[1]) as b:
            started = await a.post("/runs", json={"message": "pay bob"}, headers=bearer(key))
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            async with asyncio.timeout(TIMEOUT):
                await bank.reading.wait()
            response = await b.post(f"/runs/{run_id}/cancel", headers=bearer(key))
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "cancelled"
            # server A stops driving it (the answer may come between A's commit and its
            # release: wait for A to let go, then check)
            async with asyncio.timeout(TIMEOUT):
                await apps[0].state.server.drives.wait_idle()
            assert not apps[0].state.server.drives.is_driving(UUID(run_id))
    finally:
        bank.release.set()
        for app in apps:
            await app.state.server.close()
    await ended_cancelled(stores[0], UUID(run_id))
    assert bank.sent == []


async def test_only_recorded_cancel_requests_reach_the_holders(
    stores: list[PostgresStore],
) -> None:
    """A NOTIFY needs no privilege: one that names no recorded request (or nothing sensible) is
    ignored, and the listener goes on."""
    bank = Bank()
    run = await submit(banking_agent(stores[0], bank), "pay bob", principal="alice")
    seen: list[CancelRequest] = []
    arrived = asyncio.Event()

    def heard(request: CancelRequest) -> None:
        seen.append(request)
        arrived.set()

    stop = stores[1].on_cancel_request(heard)
    await stores[0]._fetch("SELECT pg_notify('fiduciary_cancel', 'not a request id')")
    forged = f'{{"run_id": "{run.run_id}", "by": "alice", "scopes": ["admin"]}}'
    await stores[0]._fetch("SELECT pg_notify('fiduciary_cancel', %s)", (forged,))
    await stores[0]._fetch("SELECT pg_notify('fiduciary_cancel', %s)", (str(uuid4()),))
    request = CancelRequest(run_id=run.run_id, by="alice", scopes=("runs:write",), reason="why")
    await stores[0].request_cancel(request)
    async with asyncio.timeout(TIMEOUT):
        await arrived.wait()
    assert seen == [request]  # read back from its row, the three before it ignored
    await stores[0].request_cancel(request)  # sent again: notified again, recorded once
    async with asyncio.timeout(TIMEOUT):
        while len(seen) < 2:
            arrived.clear()
            await arrived.wait()
    assert seen == [request, request]
    rows = await stores[0]._fetch("SELECT count(*) FROM cancel_requests")
    assert rows[0][0] == 1
    # an id seen on the channel cannot be replayed once the request is old (two minutes)
    await stores[0]._fetch(
        "UPDATE cancel_requests SET requested_at = now() - interval '3 minutes' RETURNING 1"
    )
    await stores[0]._fetch("SELECT pg_notify('fiduciary_cancel', %s)", (str(request.request_id),))
    # not a condition wait: it shows that nothing arrives, and no event marks "nothing came";
    # the listener reads a request's row in a task of its own, so even a later request that
    # does arrive would not prove this one was dropped
    await asyncio.sleep(0.3)
    assert len(seen) == 2
    stop()
    await stores[0].request_cancel(request)
    await asyncio.sleep(0.2)  # as above: nothing reaches a callback that stopped listening
    assert len(seen) == 2


async def test_a_request_from_someone_who_may_not_cancel_the_run_stops_nothing(
    stores: list[PostgresStore],
) -> None:
    bank = Bank()
    worker = banking_agent(stores[1], bank)
    stop = asyncio.Event()
    working = asyncio.create_task(run_worker(worker, stop=stop, poll_interval=3600))
    try:
        run = await submit(banking_agent(stores[0], bank), "pay bob", principal="alice")
        async with asyncio.timeout(TIMEOUT):
            await bank.reading.wait()
        mallory = CancelRequest(run_id=run.run_id, by="mallory")
        await stores[0].request_cancel(mallory)
        # not a condition wait: it shows that the run is not stopped (nothing happens, and no
        # event marks that): the time a wrongful stop would take to show
        await asyncio.sleep(0.5)
        held = await stores[0].get_run(run.run_id)
        assert held is not None
        assert (held.status, held.lease_owner) == ("running", worker.owner)  # still driven
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            async for event in worker.events(run.run_id):
                if isinstance(event, RunCompleted):
                    break
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await working
    assert len(bank.sent) == 1  # the run went on to its write


async def test_no_other_worker_takes_a_run_up_while_it_is_cancelled(
    stores: list[PostgresStore],
) -> None:
    """The holder takes the run over from its own drive before stopping it: the run is never
    unleased, so the other workers (woken by every release) cannot claim and drive it."""
    bank = Bank()
    workers = [banking_agent(store, bank) for store in stores[1:]]
    front = banking_agent(stores[0], bank)
    stop = asyncio.Event()
    working = [asyncio.create_task(run_worker(w, stop=stop, poll_interval=0.05)) for w in workers]
    try:
        for _ in range(3):
            bank.reading.clear()
            run = await submit(front, "pay bob", principal="alice")
            async with asyncio.timeout(TIMEOUT):
                await bank.reading.wait()
            cancelled = await front.cancel(run.run_id, by="alice", wait_seconds=TIMEOUT)
            assert cancelled.status == "cancelled"
            # not a condition wait: it shows that no worker claims the run (nothing happens, and
            # no event marks that): the time a wrongful claim would take to show
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(*working)
    models = [w.model for w in workers]
    assert sum(len(m.requests) for m in models if isinstance(m, ScriptedModel)) == 3  # once each
    assert bank.reads == 3  # no read was run again after a cancel
    assert bank.sent == []


async def test_http_cancel_of_a_run_a_worker_drives(stores: list[PostgresStore]) -> None:
    bank = Bank()
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read"])
    worker = banking_agent(stores[2], bank)
    app = create_app(
        banking_agent(stores[0], bank), keys=keys, rate_limit=RateLimit(100, 60), drive=False
    )
    stop = asyncio.Event()
    working = asyncio.create_task(run_worker(worker, stop=stop, poll_interval=3600))
    try:
        async with client_for(app) as client:
            started = await client.post("/runs", json={"message": "pay bob"}, headers=bearer(key))
            run_id = started.json()["run_id"]
            async with asyncio.timeout(TIMEOUT):
                await bank.reading.wait()
            response: httpx.Response = await client.post(
                f"/runs/{run_id}/cancel", headers=bearer(key)
            )
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "cancelled"
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await working
        await app.state.server.close()
    assert bank.sent == []


async def test_a_cancel_that_may_not_wait_still_cancels_a_run_nobody_drives(
    stores: list[PostgresStore],
) -> None:
    bank = Bank()
    front = banking_agent(stores[0], bank)
    run = await submit(front, "pay bob", principal="alice")  # claimable, not leased
    cancelled = await front.cancel(run.run_id, by="alice", wait_seconds=0)
    assert cancelled.status == "cancelled"
    rows = await stores[0]._fetch("SELECT count(*) FROM cancel_requests")
    assert rows[0][0] == 0  # nothing was asked of another process


LEASE = 2.0  # short, to keep these tests short; renewed every third, so a busy machine keeps it


async def status_of(store: PostgresStore, run_id: UUID) -> str:
    run = await store.get_run(run_id)
    assert run is not None
    return run.status


async def ended_or_driven_again(store: PostgresStore, run_id: UUID, bank: Bank) -> bool:
    """The run was cancelled, or a worker drove it again (it read the balance once more)."""
    return bank.reads > 1 or await status_of(store, run_id) == "cancelled"


async def kept_for(
    store: PostgresStore, claim: RunRecord, seconds: float, request: CancelRequest | None = None
) -> bool:
    """Wait until the holder of ``claim`` has taken its run over (the next epoch, its name) and
    kept that lease renewed ``seconds`` past its first expiry (True), or the run has been
    released and claimed again (False). ``request``: resent while the holder holds the run, as
    a requester that waits does."""
    first_until = None
    while True:
        now = await store.get_run(claim.run_id)
        assert now is not None
        assert now.status == "running"
        if now.lease_owner == claim.lease_owner and now.epoch == claim.epoch + 1:
            assert now.lease_until is not None
            first_until = first_until or now.lease_until
            if (now.lease_until - first_until).total_seconds() > seconds:
                return True
        elif now.epoch > claim.epoch and now.lease_owner is not None:
            return False  # given up, and claimed again by a worker
        if request is not None and now.lease_owner == claim.lease_owner:
            await store.request_cancel(request)
        # a condition wait, polled: the lease is renewed in the runs row by another store,
        # which offers nothing to await (and the request is resent between looks)
        await asyncio.sleep(0.1)


async def test_a_run_stays_with_its_canceller_while_the_principal_is_busy_elsewhere(
    stores: list[PostgresStore],
) -> None:
    """The worker that took the run over to cancel it keeps its lease renewed while it waits
    for the principal's lock (held here by another process for longer than a lease): no other
    worker claims the run and drives it again meanwhile."""
    bank = Bank()
    workers = [banking_agent(store, bank, lease_seconds=LEASE) for store in stores[1:]]
    front = banking_agent(stores[0], bank, lease_seconds=LEASE)
    stop = asyncio.Event()
    working = [asyncio.create_task(run_worker(w, stop=stop, poll_interval=0.05)) for w in workers]
    other = await PostgresStore.open(stores[0].dsn)  # a fourth process, writing for alice
    try:
        run = await submit(front, "pay bob", principal="alice")
        async with asyncio.timeout(TIMEOUT):
            await bank.reading.wait()
        claim = await front.get_run(run.run_id)
        async with asyncio.timeout(TIMEOUT):
            async with other.principal_lock("alice"):
                cancelling = asyncio.create_task(
                    front.cancel(run.run_id, by="alice", wait_seconds=TIMEOUT)
                )
                assert await kept_for(stores[0], claim, 1.5 * LEASE)  # renewed past its lease
            cancelled = await cancelling
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(*working)
        await other.close()
    assert cancelled.status == "cancelled"
    assert bank.reads == 1  # nobody drove it again while the cancel waited
    assert bank.sent == []


async def test_a_worker_keeps_the_run_it_cancels_for_as_long_as_the_requester_waits(
    stores: list[PostgresStore],
) -> None:
    """One attempt of the holder waits ``lease_seconds`` + 1 for the principal's lock. While the
    requester still waits (its request keeps arriving), the holder keeps the run leased and
    tries again: were it released, the other worker would claim it and run its read again."""
    bank = Bank()
    workers = [banking_agent(store, bank, lease_seconds=LEASE) for store in stores[1:]]
    stop = asyncio.Event()
    working = [asyncio.create_task(run_worker(w, stop=stop, poll_interval=0.05)) for w in workers]
    other = await PostgresStore.open(stores[0].dsn)  # a fourth process, writing for alice
    try:
        run = await submit(banking_agent(stores[0], bank), "pay bob", principal="alice")
        async with asyncio.timeout(TIMEOUT):
            await bank.reading.wait()
        claim = await stores[0].get_run(run.run_id)
        assert claim is not None
        request = CancelRequest(run_id=run.run_id, by="alice", reason="stop")
        async with asyncio.timeout(TIMEOUT):
            async with other.principal_lock("alice"):
                # held until the holder has kept the run past the end of its first attempt (up
                # to a lease for its drive to stop, then lease + 1 for the lock), or gave it up
                await kept_for(stores[0], claim, LEASE + (LEASE + 1) + 0.5, request)
            # the lock is free: the holder cancels the run, or the worker that claimed it drives
            # it again (no request reaches that one)
            await eventually(
                lambda: ended_or_driven_again(stores[0], run.run_id, bank),
                what="the run cancelled or driven again",
                timeout=TIMEOUT,
                interval=0.05,
            )
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(*working)
        await other.close()
    assert bank.reads == 1  # nobody drove it again while the cancel waited
    ended = await stores[0].get_run(run.run_id)
    assert ended is not None
    assert (ended.status, ended.lease_owner) == ("cancelled", None)
    assert bank.sent == []


async def test_a_server_keeps_the_run_it_cancels_for_as_long_as_the_requester_waits(
    stores: list[PostgresStore],
) -> None:
    """The same for a server driving the run: were the run released after one attempt, a
    worker would claim it and run its read again."""
    bank = Bank()
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read"])
    app = create_app(
        banking_agent(stores[0], bank, lease_seconds=LEASE),
        keys=keys,
        rate_limit=RateLimit(100, 60),
    )
    stop = asyncio.Event()
    worker = banking_agent(stores[2], bank, lease_seconds=LEASE)
    working = asyncio.create_task(run_worker(worker, stop=stop, poll_interval=0.05))
    other = await PostgresStore.open(stores[0].dsn)  # a fourth process, writing for alice
    try:
        async with client_for(app) as client:
            started = await client.post("/runs", json={"message": "pay bob"}, headers=bearer(key))
            assert started.status_code == 202, started.text
            run_id = UUID(started.json()["run_id"])
            async with asyncio.timeout(TIMEOUT):
                await bank.reading.wait()
            claim = await stores[1].get_run(run_id)
            assert claim is not None
            request = CancelRequest(run_id=run_id, by="alice", reason="stop")
            async with asyncio.timeout(TIMEOUT):
                async with other.principal_lock("alice"):
                    await kept_for(stores[1], claim, LEASE + (LEASE + 1) + 0.5, request)
                await eventually(
                    lambda: ended_or_driven_again(stores[1], run_id, bank),
                    what="the run cancelled or driven again",
                    timeout=TIMEOUT,
                    interval=0.05,
                )
    finally:
        stop.set()
        bank.release.set()
        async with asyncio.timeout(TIMEOUT):
            await working
        await app.state.server.close()
        await other.close()
    assert bank.reads == 1  # nobody drove it again while the cancel waited
    await ended_cancelled(stores[1], run_id)
    assert bank.sent == []


async def test_concurrent_cancels_through_one_server_share_one_outcome(
    stores: list[PostgresStore],
) -> None:
    bank = Bank()
    keys = MemoryKeyStore()
    key, _ = await keys.create("alice", ["runs:write", "runs:read"])
    app = create_app(banking_agent(stores[0], bank), keys=keys, rate_limit=RateLimit(100, 60))
    try:
        async with client_for(app) as client:
            started = await client.post("/runs", json={"message": "pay bob"}, headers=bearer(key))
            run_id = started.json()["run_id"]
            async with asyncio.timeout(TIMEOUT):
                await bank.reading.wait()
            answers = await asyncio.gather(
                *(client.post(f"/runs/{run_id}/cancel", headers=bearer(key)) for _ in range(3))
            )
    finally:
        bank.release.set()
        await app.state.server.close()
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    assert {a.json()["status"] for a in answers} == {"cancelled"}
    await ended_cancelled(stores[0], UUID(run_id))
