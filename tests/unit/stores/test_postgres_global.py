"""The global order on PostgreSQL: a transaction that commits late never has its events
skipped by a reader, whatever number its rows drew, and a reader held back by it is woken
when it may read on (no notification says so: the store looks again by itself).

The transactions are driven by hand on raw connections, so that the test decides which one
draws its numbers first and which one commits first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest

from fiduciary.events import Event
from fiduciary.stores.base import GlobalEvent, RunRecord
from tests.contract.builders import deltas, make_run, started
from tests.postgres_support import empty_database, require_driver

pytestmark = pytest.mark.postgres

require_driver()
import psycopg  # noqa: E402

from fiduciary.stores.postgres import PostgresStore  # noqa: E402

TIMEOUT = 60.0  # a hang guard: on PostgreSQL, any transaction on the server delays reads
INSERT = (
    "INSERT INTO events (run_id, seq, type, at, payload) VALUES (%s, %s, %s, %s, %s::json) "
    "RETURNING gseq"
)


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(postgres_dsn)
    try:
        yield opened
    finally:
        await opened.close()


async def raw(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def new_run(store: PostgresStore) -> RunRecord:
    run = make_run()
    await store.create_run(run, [started(run.run_id)])
    return run


async def insert(conn: psycopg.AsyncConnection[Any], event: Event) -> int:
    """The event's row, inserted in ``conn``'s open transaction; its gseq."""
    cur = await conn.execute(
        INSERT, (event.run_id, event.seq, event.type, event.at, event.model_dump_json())
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def read_on(store: PostgresStore, after: int, count: int) -> list[GlobalEvent]:
    """The next ``count`` global events after ``after``, waiting on the commit bell."""
    got: list[GlobalEvent] = []
    cursor = after
    async with asyncio.timeout(TIMEOUT):
        while len(got) < count:
            since = store.commit_generation
            read = await store.read_global(after=cursor)
            got += read.events
            cursor = read.next_after
            if not read.events and not read.more:
                await store.wait_for_commits(since=since)
    return got


def keys(events: list[GlobalEvent]) -> list[tuple[UUID, int]]:
    return [(g.event.run_id, g.event.seq) for g in events]


async def test_a_late_commit_with_a_lower_number_is_not_skipped(
    store: PostgresStore, postgres_dsn: str
) -> None:
    x = await new_run(store)
    y = await new_run(store)
    start = await read_on(store, 0, 2)
    early, late = await raw(postgres_dsn), await raw(postgres_dsn)
    try:
        # "early" takes its transaction id first; "late" then inserts, drawing the LOWER gseq;
        # "early" inserts (the higher gseq) and commits; "late" commits last
        await early.execute("BEGIN")
        await early.execute("SELECT pg_current_xact_id()")
        await late.execute("BEGIN")
        low = await insert(late, deltas(y.run_id, 2, 1)[0])
        high = await insert(early, deltas(x.run_id, 2, 1)[0])
        assert low < high
        await early.execute("COMMIT")

        first = await read_on(store, start[-1].position, 1)
        assert keys(first) == [(x.run_id, 2)]  # readable: older than "late"
        assert first[0].position == high  # a reader ordering by gseq would now skip "low"

        await late.execute("COMMIT")
        then = await read_on(store, first[-1].position, 1)
        assert keys(then) == [(y.run_id, 2)]
        assert then[0].position == low
    finally:
        await early.close()
        await late.close()


async def test_events_behind_an_open_transaction_wait_for_it_then_the_bell_rings(
    store: PostgresStore, postgres_dsn: str
) -> None:
    x = await new_run(store)
    y = await new_run(store)
    start = await read_on(store, 0, 2)
    late = await raw(postgres_dsn)
    try:
        await late.execute("BEGIN")
        await insert(late, deltas(x.run_id, 2, 1)[0])  # open, older than the commit below
        await store.commit(y.run_id, epoch=0, events=deltas(y.run_id, 2, 1))

        # y's event is committed but may not be read: x's could still commit before it
        since = store.commit_generation
        held = await store.read_global(after=start[-1].position)
        assert (held.events, held.next_after) == ([], start[-1].position)
        # a raw commit sends no notification: the store looks again by itself, and rings
        await late.execute("COMMIT")
        async with asyncio.timeout(TIMEOUT):
            await store.wait_for_commits(since=since)
        both = await read_on(store, start[-1].position, 2)
        assert keys(both) == [(x.run_id, 2), (y.run_id, 2)]
    finally:
        await late.close()


async def test_another_processes_commits_ring_the_bell(store: PostgresStore) -> None:
    other = await PostgresStore.open(store.dsn)
    try:
        run = await new_run(other)
        start = await read_on(store, 0, 1)
        since = store.commit_generation
        await other.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2))
        async with asyncio.timeout(TIMEOUT):
            assert await store.wait_for_commits(since=since) > since
        assert keys(await read_on(store, start[-1].position, 2)) == [
            (run.run_id, 2),
            (run.run_id, 3),
        ]
    finally:
        await other.close()


async def test_events_written_before_the_migration_keep_their_time_order() -> None:
    """A database of 0003 with events: 0004 numbers them by time, each run in seq order."""
    from fiduciary.stores.postgres import MIGRATIONS_DIR, apply_migrations
    from fiduciary.stores.sqlite import load_migrations

    migrations = load_migrations(MIGRATIONS_DIR)
    dsn = empty_database("global_upgrade")
    a, b = make_run(), make_run()
    conn = await raw(dsn)
    try:
        assert await apply_migrations(conn, migrations[:3]) == [1, 2, 3]
        for run in (a, b):
            await conn.execute(
                "INSERT INTO runs (run_id, principal, status, created_at, updated_at) "
                "VALUES (%s, 'alice', 'completed', now(), now())",
                (run.run_id,),
            )
        # b's events are older than a's; a's seq 2 is stamped before its seq 1 (a clock that
        # went back): it still comes after it
        rows = [
            (a.run_id, 1, deltas(a.run_id, 1, 1, start=5.0)[0]),
            (a.run_id, 2, deltas(a.run_id, 2, 1, start=0.5)[0]),
            (b.run_id, 1, deltas(b.run_id, 1, 1, start=1.0)[0]),
        ]
        for run_id, seq, event in rows:
            await conn.execute(
                "INSERT INTO events (run_id, seq, type, at, payload) VALUES (%s, %s, %s, %s, %s)",
                (run_id, seq, event.type, event.at, event.model_dump_json()),
            )
    finally:
        await conn.close()
    store = await PostgresStore.open(dsn)
    try:
        everything = await read_on(store, 0, 3)
        assert keys(everything) == [(b.run_id, 1), (a.run_id, 1), (a.run_id, 2)]
        run = make_run()
        await store.create_run(run, [started(run.run_id)])  # new numbers follow the old
        assert keys(await read_on(store, everything[-1].position, 1)) == [(run.run_id, 1)]
    finally:
        await store.close()
