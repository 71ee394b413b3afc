"""What only the PostgreSQL store does: schema and migrations, group commit, LISTEN/NOTIFY across
store instances, claiming runs with SKIP LOCKED, fencing across instances, waking workers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any
from uuid import UUID, uuid4

import pytest

from fiduciary.events import Event
from fiduciary.exceptions import ConflictError, StaleEpochError, StoreError
from fiduciary.stores.base import RunRecord, Subscription
from tests.contract.builders import at, deltas, make_approval, make_ledger, make_run, started
from tests.postgres_support import empty_database, require_driver
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

require_driver()
import psycopg  # noqa: E402

from fiduciary.stores.postgres import (  # noqa: E402  (after the skip: needs the extra)
    MIGRATIONS_DIR,
    SCHEMA_PATH,
    PostgresStore,
    apply_migrations,
)
from fiduciary.stores.sqlite import load_migrations  # noqa: E402

MIGRATIONS = load_migrations(MIGRATIONS_DIR)

TIMEOUT = 5.0


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(postgres_dsn)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def other(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    """A second store on the same database: another process or machine, as far as it knows."""
    opened = await PostgresStore.open(postgres_dsn)
    try:
        yield opened
    finally:
        await opened.close()


async def new_run(store: PostgresStore, **kwargs: Any) -> RunRecord:
    run = make_run(**kwargs)
    await store.create_run(run, [started(run.run_id, principal=run.principal)])
    return run


async def take(sub: Subscription, count: int, *, after: int = 0) -> list[Event]:
    """The next ``count`` events of ``sub`` with a seq above ``after`` (bounded).

    A subscriber may also receive events committed shortly before it subscribed (the contract
    says: read the past after subscribing, and skip what was read); those are dropped here.
    """
    received: list[Event] = []
    async with asyncio.timeout(TIMEOUT):
        async for event in sub:
            if event.seq > after:
                received.append(event)
            if len(received) == count:
                break
    return received


async def drain(sub: Subscription) -> list[Event]:
    sub.close()
    async with asyncio.timeout(TIMEOUT):
        return [event async for event in sub]


async def raw(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


# --- schema and migrations ----------------------------------------------------------------

_CATALOG = {
    "columns": "SELECT table_name, ordinal_position, column_name, data_type, udt_name, "
    "is_nullable, column_default, is_identity FROM information_schema.columns "
    "WHERE table_schema = 'public' ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes "
    "WHERE schemaname = 'public' ORDER BY 1, 2",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger "
    "WHERE NOT tgisinternal ORDER BY 1, 2",
    "functions": "SELECT proname, pg_get_functiondef(oid) FROM pg_proc "
    "WHERE pronamespace = 'public'::regnamespace ORDER BY 1",
    "relations": "SELECT relname, relkind, reloptions FROM pg_class "
    "WHERE relnamespace = 'public'::regnamespace ORDER BY 1",
}


async def catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await raw(dsn)
    try:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for name, query in _CATALOG.items():
            cur = await conn.execute(query.encode())
            out[name] = await cur.fetchall()
        return out
    finally:
        await conn.close()


async def test_schema_sql_and_the_migrations_build_identical_catalogs() -> None:
    from_schema = empty_database("schema")
    conn = await raw(from_schema)
    try:
        await conn.execute(SCHEMA_PATH.read_text(encoding="utf-8").encode())
    finally:
        await conn.close()
    from_migrations = empty_database("migrations")
    store = await PostgresStore.open(from_migrations)
    await store.close()

    schema_catalog = await catalog(from_schema)
    migrated_catalog = await catalog(from_migrations)

    assert schema_catalog["columns"], "the schema built nothing"
    for part in _CATALOG:
        assert schema_catalog[part] == migrated_catalog[part], part


async def test_migrations_apply_once_and_are_recorded(postgres_dsn: str) -> None:
    conn = await raw(postgres_dsn)
    try:
        assert await apply_migrations(conn) == []  # the clone is migrated already
        cur = await conn.execute("SELECT version, name FROM schema_migrations")
        assert await cur.fetchall() == [(m.version, m.name) for m in MIGRATIONS]
        assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    finally:
        await conn.close()


async def test_processes_opening_a_fresh_database_together_migrate_it_once() -> None:
    dsn = empty_database("race")
    stores = await asyncio.gather(*(PostgresStore.open(dsn) for _ in range(4)))
    try:
        run = await new_run(stores[0])
        assert await stores[3].get_run(run.run_id) == replace(run, last_seq=1)
    finally:
        for s in stores:
            await s.close()
    conn = await raw(dsn)
    try:
        cur = await conn.execute("SELECT count(*) FROM schema_migrations")
        assert await cur.fetchone() == (len(MIGRATIONS),)
    finally:
        await conn.close()


async def test_a_database_of_the_first_release_is_upgraded_keeping_its_runs() -> None:
    """A database migrated to 0001 only (the first release) gets the later migrations when a
    newer fiduciary opens it, and its runs are still there."""
    dsn = empty_database("upgrade")
    conn = await raw(dsn)
    try:
        assert await apply_migrations(conn, MIGRATIONS[:1]) == [1]
    finally:
        await conn.close()
    old_run = make_run()
    conn = await raw(dsn)
    try:  # a run written by the first release (its own SQL, not this store's)
        await conn.execute(
            "INSERT INTO runs (run_id, principal, status, created_at, updated_at) "
            "VALUES (%s, 'alice', 'completed', now(), now())",
            (old_run.run_id,),
        )
    finally:
        await conn.close()
    store = await PostgresStore.open(dsn)
    try:
        kept = await store.get_run(old_run.run_id)
        assert kept is not None
        assert kept.status == "completed"
        conn = await raw(dsn)
        try:
            cur = await conn.execute("SELECT max(version) FROM schema_migrations")
            assert await cur.fetchone() == (MIGRATIONS[-1].version,)
            cur = await conn.execute("SELECT to_regclass('cancel_requests') IS NOT NULL")
            assert await cur.fetchone() == (True,)
        finally:
            await conn.close()
    finally:
        await store.close()


async def test_a_database_with_a_newer_schema_is_refused(postgres_dsn: str) -> None:
    conn = await raw(postgres_dsn)
    try:
        await conn.execute("INSERT INTO schema_migrations VALUES (99, 'from_the_future', now())")
    finally:
        await conn.close()

    with pytest.raises(StoreError, match="newer"):
        await PostgresStore.open(postgres_dsn)


async def test_an_unreachable_server_is_a_store_error() -> None:
    store = PostgresStore(
        "postgresql://postgres@127.0.0.1:1/nothing", connect_timeout=1.0, max_connections=1
    )
    with pytest.raises(StoreError):
        await store.get_run(uuid4())
    await store.close()


def test_without_psycopg_the_import_error_names_the_extra() -> None:
    code = "import sys; sys.modules['psycopg'] = None; import fiduciary.stores.postgres"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert "pip install 'fiduciary[postgres]'" in result.stderr


# --- group commit ---------------------------------------------------------------------------


async def test_commits_of_one_tick_share_one_transaction(store: PostgresStore) -> None:
    runs = [await new_run(store, created=i) for i in range(10)]
    before = store.transactions

    await asyncio.gather(
        *(store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 3)) for r in runs)
    )

    assert store.transactions == before + 1
    for r in runs:
        assert [e.seq for e in await store.read_events(r.run_id)] == [1, 2, 3, 4]


async def test_a_request_the_database_refuses_fails_alone_in_its_batch(
    store: PostgresStore,
) -> None:
    good = await new_run(store)
    bogus = make_run().with_(status="bogus")  # passes the Python checks, not the CHECK

    results = await asyncio.gather(
        store.commit(good.run_id, epoch=0, events=deltas(good.run_id, 2, 2)),
        store.create_run(bogus),
        return_exceptions=True,
    )

    assert results[0] is None
    assert isinstance(results[1], StoreError)
    assert await store.get_run(bogus.run_id) is None
    assert [e.seq for e in await store.read_events(good.run_id)] == [1, 2, 3]


async def test_a_run_created_and_committed_in_one_batch(store: PostgresStore) -> None:
    run = make_run()
    await asyncio.gather(
        store.create_run(run, [started(run.run_id)]),
        store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2), status="completed"),
    )

    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert (stored.last_seq, stored.status) == (3, "completed")


async def test_a_json_nul_character_is_kept(store: PostgresStore) -> None:
    run = await new_run(store)
    approval = make_approval(run.run_id)
    approval = replace(approval, args={**approval.args, "memo": "a\x00b"})
    await store.commit(run.run_id, epoch=0, approvals=[approval])

    assert await store.get_approval(approval.approval_id) == approval


# --- live events across instances ---------------------------------------------------------


async def test_events_committed_by_another_instance_reach_subscribers_here(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = await new_run(other)
    remote = store.subscribe(run.run_id)
    local = other.subscribe(run.run_id)
    first, second = deltas(run.run_id, 2, 3), deltas(run.run_id, 5, 2)

    await other.commit(run.run_id, epoch=0, events=first)
    await other.commit(run.run_id, epoch=0, events=second)

    assert await take(remote, 5, after=1) == first + second
    # each event once: the committing instance hands its own events over directly and skips
    # its own notifications
    await other.commit(run.run_id, epoch=0, events=deltas(run.run_id, 7, 1))
    assert [e.seq for e in await take(remote, 1)] == [7]
    assert [e.seq for e in await drain(local)] == [2, 3, 4, 5, 6, 7]
    assert await drain(remote) == []


async def test_a_run_created_elsewhere_can_be_followed_from_its_first_commit(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = make_run()
    sub = store.subscribe(run.run_id)
    await other.create_run(run, [started(run.run_id), *deltas(run.run_id, 2, 2)])

    assert [e.seq for e in await take(sub, 3)] == [1, 2, 3]
    sub.close()


async def test_losing_the_listener_connection_ends_subscriptions_as_overflowed(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = await new_run(other)
    sub = store.subscribe(run.run_id)
    conn = await raw(store.dsn)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        )
    finally:
        await conn.close()

    assert all(e.seq == 1 for e in await drain_until_closed(sub))  # at most the past
    assert sub.overflowed is True

    # the listener reconnects; a subscription made once it listens again gets the events
    async def followed() -> bool:
        again = store.subscribe(run.run_id)
        last = (await other.read_events(run.run_id))[-1].seq
        await other.commit(run.run_id, epoch=0, events=deltas(run.run_id, last + 1, 1))
        got = await drain_until_closed(again, stop_after=1)
        return [e.seq for e in got] == [last + 1]  # not interrupted, nothing missed

    # ``followed`` itself waits (for the subscription's events): no pause between looks
    await eventually(followed, what="the listener reconnected", timeout=TIMEOUT, interval=0)


async def drain_until_closed(sub: Subscription, stop_after: int | None = None) -> list[Event]:
    """What ``sub`` yields until it ends (or ``stop_after`` events), bounded by a short wait."""
    received: list[Event] = []
    with_limit = asyncio.timeout(TIMEOUT)
    async with with_limit:
        async for event in sub:
            received.append(event)
            if stop_after is not None and len(received) >= stop_after:
                sub.close()
    return received


async def test_a_subscription_before_the_store_listens_ends_overflowed(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn)  # not opened yet
    try:
        sub = store.subscribe(uuid4())
        assert await drain_until_closed(sub) == []
        assert sub.overflowed is True
    finally:
        await store.close()


# --- leases and fencing across instances --------------------------------------------------


async def test_a_stale_worker_on_another_instance_is_fenced(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = await new_run(store)
    old = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    assert old is not None
    await store.commit(run.run_id, epoch=old.epoch, events=deltas(run.run_id, 2, 1))

    new = await other.acquire(run.run_id, owner="w2", now=at(41), ttl_seconds=30)  # lapsed

    assert new is not None
    assert new.epoch == old.epoch + 1
    with pytest.raises(StaleEpochError):
        await store.commit(run.run_id, epoch=old.epoch, events=deltas(run.run_id, 3, 1))
    assert await store.renew(run.run_id, epoch=old.epoch, now=at(42), ttl_seconds=30) is False
    await other.commit(run.run_id, epoch=new.epoch, events=deltas(run.run_id, 3, 1))
    assert [e.seq for e in await store.read_events(run.run_id)] == [1, 2, 3]


async def test_a_ledger_begin_waits_for_a_takeover_in_flight_and_is_fenced_by_it(
    store: PostgresStore, postgres_dsn: str
) -> None:
    run = await new_run(store)
    entry = make_ledger(run.run_id)
    conn = await raw(postgres_dsn)
    try:
        async with conn.transaction():  # another instance's acquire, not committed yet
            await conn.execute(
                "UPDATE runs SET epoch = epoch + 1, lease_owner = 'w2' WHERE run_id = %s",
                (run.run_id,),
            )
            begin = asyncio.create_task(store.ledger_begin(entry, epoch=0))
            watcher = await raw(postgres_dsn)
            try:

                async def blocked() -> bool:
                    cur = await watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    row = await cur.fetchone()
                    return bool(row and row[0])

                await eventually(blocked, what="the ledger begin to wait on the runs row")
            finally:
                await watcher.close()
            assert not begin.done()  # it waits for the runs row, not for a stale snapshot
    finally:
        await conn.close()

    with pytest.raises(StaleEpochError):
        async with asyncio.timeout(TIMEOUT):
            await begin
    assert await store.ledger_get(entry.key) is None


async def test_concurrent_appends_from_two_instances_never_interleave_seqs(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = await new_run(store)

    async def append(target: PostgresStore, rounds: int) -> int:
        written = 0
        for _ in range(rounds):
            last = (await target.get_run(run.run_id) or run).last_seq
            try:
                await target.commit(run.run_id, epoch=0, events=deltas(run.run_id, last + 1, 2))
                written += 2
            except ConflictError:
                pass
        return written

    a, b = await asyncio.gather(append(store, 30), append(other, 30))

    events = await store.read_events(run.run_id)
    assert [e.seq for e in events] == list(range(1, 2 + a + b))


# --- workers: claiming and waking ---------------------------------------------------------


async def test_claim_skips_runs_locked_by_another_connection(
    store: PostgresStore, postgres_dsn: str
) -> None:
    locked = await new_run(store, created=1)
    free = await new_run(store, created=2)
    conn = await raw(postgres_dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (locked.run_id,))
            async with asyncio.timeout(TIMEOUT):  # SKIP LOCKED: no waiting for that row
                claimed = await store.claim_runnable(
                    owner="w1", now=at(10), ttl_seconds=30, limit=5
                )
    finally:
        await conn.close()

    assert [r.run_id for r in claimed] == [free.run_id]
    assert claimed[0].lease_owner == "w1"
    assert claimed[0].epoch == 1
    assert claimed[0].lease_until == at(40)
    again = await store.claim_runnable(owner="w2", now=at(11), ttl_seconds=30, limit=5)
    assert [r.run_id for r in again] == [locked.run_id]


async def test_concurrent_claims_from_two_instances_never_share_a_run(
    store: PostgresStore, other: PostgresStore
) -> None:
    runs = {(await new_run(store, created=i)).run_id for i in range(30)}

    async def claim_all(target: PostgresStore, owner: str) -> list[UUID]:
        got: list[UUID] = []
        while True:
            claimed = await target.claim_runnable(owner=owner, now=at(5), ttl_seconds=60, limit=3)
            if not claimed:
                return got
            got.extend(r.run_id for r in claimed)

    a, b = await asyncio.gather(claim_all(store, "a"), claim_all(other, "b"))

    assert not set(a) & set(b)
    assert set(a) | set(b) == runs
    assert len(a) + len(b) == len(runs)


async def test_what_is_claimable(store: PostgresStore) -> None:
    running = await new_run(store, created=1)
    leased = await new_run(store, created=2)
    lapsed = await new_run(store, created=3)
    waiting = await new_run(store, created=4, status="awaiting_approval")
    decided = await new_run(store, created=5, status="awaiting_approval")
    expired = await new_run(store, created=6, status="awaiting_approval")
    done = await new_run(store, created=7, status="completed")
    await store.acquire(leased.run_id, owner="x", now=at(100), ttl_seconds=60)
    await store.acquire(lapsed.run_id, owner="x", now=at(0), ttl_seconds=60)
    for run, expires_in in ((waiting, 3600), (decided, 3600), (expired, 10)):
        approval = make_approval(run.run_id, created=50)
        approval = replace(approval, expires_at=at(50 + expires_in))
        await store.commit(run.run_id, epoch=0, approvals=[approval])
        if run is decided:
            assert await store.decide_approval(approval.with_(status="approved", decided_by="a"))
    # a decision on a finished run wakes nothing
    late = make_approval(done.run_id)
    await store.commit(done.run_id, epoch=0, approvals=[late])
    await store.decide_approval(late.with_(status="denied"))

    claimed = await store.claim_runnable(owner="w", now=at(100), ttl_seconds=30, limit=10)

    assert [r.run_id for r in claimed] == [
        running.run_id,
        lapsed.run_id,
        decided.run_id,
        expired.run_id,
    ]
    # claimed: leased now, nothing more to claim until the leases lapse
    assert await store.claim_runnable(owner="v", now=at(101), ttl_seconds=30, limit=10) == []


async def test_a_decision_claimed_by_a_worker_that_dies_before_writing_is_claimed_again(
    store: PostgresStore,
) -> None:
    """The claim leaves the wake marker: only the drive's first commit (the run ``running``
    again) takes the decision up. Before, the claim cleared it and the run was lost."""
    run = await new_run(store, status="awaiting_approval")
    approval = make_approval(run.run_id)
    await store.commit(run.run_id, epoch=0, approvals=[approval])
    assert await store.decide_approval(approval.with_(status="approved", decided_by="alice"))
    first = await store.claim_runnable(owner="dead", now=at(10), ttl_seconds=30)
    assert [r.run_id for r in first] == [run.run_id]
    # ... and the worker dies here, having written nothing

    assert await store.claim_runnable(owner="w", now=at(20), ttl_seconds=30) == []  # still leased
    again = await store.claim_runnable(owner="w", now=at(41), ttl_seconds=30)
    assert [r.run_id for r in again] == [run.run_id]
    assert [r.run_id for r in await store.runs_to_resume(now=at(80))] == [run.run_id]

    await store.commit(run.run_id, epoch=again[0].epoch, status="running")  # taken up
    await store.commit(run.run_id, epoch=again[0].epoch, status="awaiting_approval")
    await store.release(run.run_id, epoch=again[0].epoch)
    assert await store.claim_runnable(owner="w", now=at(80), ttl_seconds=30) == []
    conn = await raw(store.dsn)
    try:
        cur = await conn.execute("SELECT count(*) FROM runs WHERE wake_at IS NOT NULL")
        assert await cur.fetchone() == (0,)
    finally:
        await conn.close()


async def test_a_claimed_run_is_fenced_against_its_previous_holder(store: PostgresStore) -> None:
    run = await new_run(store)
    old = await store.acquire(run.run_id, owner="w1", now=at(0), ttl_seconds=10)
    assert old is not None

    claimed = await store.claim_runnable(owner="w2", now=at(10), ttl_seconds=30)

    assert [r.epoch for r in claimed] == [old.epoch + 1]
    with pytest.raises(StaleEpochError):
        await store.commit(run.run_id, epoch=old.epoch, events=deltas(run.run_id, 2, 1))


async def test_a_decision_on_another_instance_wakes_the_workers_here(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = await new_run(store, status="awaiting_approval")
    approval = make_approval(run.run_id)
    await store.commit(run.run_id, epoch=0, approvals=[approval])
    lease = await store.acquire(run.run_id, owner="w1", now=at(1), ttl_seconds=30)
    assert lease is not None
    await store.release(run.run_id, epoch=lease.epoch)
    assert await store.claim_runnable(owner="w1", now=at(2), ttl_seconds=30) == []
    seen = store.work_generation

    assert await other.decide_approval(approval.with_(status="approved", decided_by="alice"))

    async with asyncio.timeout(TIMEOUT):
        assert await store.wait_for_work(since=seen) > seen
    claimed = await store.claim_runnable(owner="w1", now=at(3), ttl_seconds=30)
    assert [r.run_id for r in claimed] == [run.run_id]


async def test_releasing_a_run_that_still_runs_wakes_the_workers(
    store: PostgresStore, other: PostgresStore
) -> None:
    run = await new_run(store)
    lease = await store.acquire(run.run_id, owner="w1", now=at(1), ttl_seconds=30)
    assert lease is not None
    seen = other.work_generation

    await store.release(run.run_id, epoch=lease.epoch)

    async with asyncio.timeout(TIMEOUT):
        assert await other.wait_for_work(since=seen) > seen


async def test_mark_runnable_wakes_a_suspended_run(store: PostgresStore) -> None:
    run = await new_run(store, status="awaiting_client_result")
    finished = await new_run(store, status="completed")
    assert await store.claim_runnable(owner="w", now=at(1), ttl_seconds=30) == []

    assert await store.mark_runnable(run.run_id) is True
    assert await store.mark_runnable(finished.run_id) is False
    assert await store.mark_runnable(uuid4()) is False

    claimed = await store.claim_runnable(owner="w", now=at(1), ttl_seconds=30)
    assert [r.run_id for r in claimed] == [run.run_id]


async def test_a_worker_does_not_claim_a_run_it_still_drives(store: PostgresStore) -> None:
    mine = await new_run(store, created=1)
    other_run = await new_run(store, created=2)
    first = await store.claim_runnable(owner="w", now=at(0), ttl_seconds=1, limit=1)
    assert [r.run_id for r in first] == [mine.run_id]

    # its lease lapsed (the worker was slow), but it is still driving it
    again = await store.claim_runnable(
        owner="w", now=at(5), ttl_seconds=1, limit=5, exclude=[mine.run_id]
    )

    assert [r.run_id for r in again] == [other_run.run_id]
    assert (await store.get_run(mine.run_id)) == first[0]  # not fenced by its own worker
    taken = await store.claim_runnable(owner="w2", now=at(5), ttl_seconds=1, limit=5)
    assert [r.run_id for r in taken] == [mine.run_id]  # another worker may take it over
