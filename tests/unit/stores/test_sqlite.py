"""What only the SQLite store does: files, migrations, group commit, several connections."""

from __future__ import annotations

import asyncio
import json
import math
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fiduciary.events import Event, TextDelta
from fiduciary.exceptions import ConflictError, StaleEpochError, StoreError
from fiduciary.stores._sql.sqlite_writer import dt as _dt
from fiduciary.stores._sql.sqlite_writer import ts as _ts
from fiduciary.stores.base import RunRecord, Subscription
from fiduciary.stores.sqlite import (
    MIGRATIONS_DIR,
    SCHEMA_PATH,
    Migration,
    SQLiteStore,
    apply_migrations,
    load_migrations,
    split_statements,
)
from tests.contract.builders import (
    at,
    deltas,
    make_approval,
    make_audit,
    make_ledger,
    make_run,
    started,
)

TIMEOUT = 5.0


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "fiduciary.sqlite3"


@pytest.fixture
async def sqlite_store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = await SQLiteStore.open(db_path)
    try:
        yield opened
    finally:
        await opened.close()


async def new_run(store: SQLiteStore, **kwargs: Any) -> RunRecord:
    run = make_run(**kwargs)
    await store.create_run(run, [started(run.run_id, principal=run.principal)])
    return run


async def drain(sub: Subscription) -> list[Event]:
    """Close ``sub`` and return what it had received (bounded)."""
    sub.close()
    async with asyncio.timeout(TIMEOUT):
        return [event async for event in sub]


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the file (autocommit), closed afterwards."""
    with closing(sqlite3.connect(path, isolation_level=None, timeout=TIMEOUT)) as conn:
        yield conn


# --- files and connections ----------------------------------------------------------------


async def test_a_fresh_file_works_on_first_use_in_wal_mode(db_path: Path) -> None:
    store = SQLiteStore(db_path)  # nothing opened yet
    run = make_run()

    await store.create_run(run)

    assert await store.get_run(run.run_id) == run
    await store.close()
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT version, name FROM schema_migrations").fetchall() == [
            (m.version, m.name) for m in load_migrations()
        ]


async def test_everything_persists_after_close_and_reopen(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)
    run = await new_run(store)
    approval = make_approval(run.run_id)
    audit = make_audit(run.run_id)
    entry = make_ledger(run.run_id)
    await store.commit(
        run.run_id,
        epoch=0,
        events=deltas(run.run_id, 2, 3),
        status="awaiting_approval",
        approvals=[approval],
        audit=[audit],
    )
    await store.ledger_begin(entry, epoch=0)
    lease = await store.acquire(run.run_id, owner="w1", now=at(10), ttl_seconds=30)
    events = await store.read_events(run.run_id)
    await store.close()

    reopened = await SQLiteStore.open(db_path)
    try:
        assert await reopened.get_run(run.run_id) == lease
        assert await reopened.read_events(run.run_id) == events
        assert await reopened.get_approval(approval.approval_id) == approval
        assert await reopened.audit_records(run.run_id) == [audit]
        assert await reopened.ledger_get(entry.key) == entry
        assert await reopened.autonomous_spend("alice", since=at(0)) == Decimal("0.10")
    finally:
        await reopened.close()


async def test_a_second_store_on_the_same_file_sees_committed_data(
    sqlite_store: SQLiteStore, db_path: Path
) -> None:
    other = await SQLiteStore.open(db_path)
    try:
        run = await new_run(sqlite_store)
        await sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2))
        assert await other.read_events(run.run_id) == await sqlite_store.read_events(run.run_id)

        # The other store takes the lease: the first one's epoch is fenced across connections.
        lease = await other.acquire(run.run_id, owner="w2", now=at(10), ttl_seconds=30)
        assert lease is not None
        with pytest.raises(StaleEpochError):
            await sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 4, 1))
        await other.commit(run.run_id, epoch=lease.epoch, events=deltas(run.run_id, 4, 1))
        stored = await sqlite_store.get_run(run.run_id)
        assert stored is not None
        assert stored.last_seq == 4
        with pytest.raises(ConflictError):  # seqs are checked against the file, not a cache
            await sqlite_store.commit(
                run.run_id, epoch=lease.epoch, events=deltas(run.run_id, 4, 1)
            )
    finally:
        await other.close()


async def test_a_decision_from_another_store_is_seen_and_conditional(
    sqlite_store: SQLiteStore, db_path: Path
) -> None:
    run = await new_run(sqlite_store)
    approval = make_approval(run.run_id)
    await sqlite_store.commit(run.run_id, epoch=0, approvals=[approval])
    approved = approval.with_(status="approved", decided_by="alice", decided_at=at(60))

    other = await SQLiteStore.open(db_path)
    try:
        assert await other.decide_approval(approved) is True
    finally:
        await other.close()

    assert await sqlite_store.get_approval(approval.approval_id) == approved
    assert await sqlite_store.decide_approval(approval.with_(status="denied")) is False


def test_a_decision_from_another_process_is_seen(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    run = make_run()
    approval = make_approval(run.run_id)

    async def setup() -> None:
        await store.create_run(run)
        await store.commit(run.run_id, epoch=0, approvals=[approval])

    asyncio.run(setup())  # the store stays open (idle) while the other process writes
    script = textwrap.dedent(
        f"""
        import asyncio, datetime, uuid
        from fiduciary.stores.sqlite import SQLiteStore

        async def main():
            store = await SQLiteStore.open({str(db_path)!r})
            record = await store.get_approval(uuid.UUID({str(approval.approval_id)!r}))
            decided = record.with_(
                status="approved",
                decided_by="bob",
                decided_at=datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC),
            )
            assert await store.decide_approval(decided)
            await store.close()

        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, capture_output=True)

    async def check() -> None:
        try:
            stored = await store.get_approval(approval.approval_id)
            assert stored is not None
            assert stored.status == "approved"
            assert stored.decided_by == "bob"
            assert await store.decide_approval(approval.with_(status="denied")) is False
        finally:
            await store.close()

    asyncio.run(check())


# --- group commit -------------------------------------------------------------------------


async def test_commits_issued_in_one_tick_share_one_transaction(
    sqlite_store: SQLiteStore,
) -> None:
    runs = [await new_run(sqlite_store, created=i) for i in range(50)]
    before = sqlite_store.transactions

    await asyncio.gather(
        *(sqlite_store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 2)) for r in runs)
    )

    assert sqlite_store.transactions - before == 1
    for r in runs:
        assert [e.seq for e in await sqlite_store.read_events(r.run_id)] == [1, 2, 3]


async def test_a_batch_holds_at_most_batch_size_requests(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path, batch_size=8)
    try:
        runs = [await new_run(store, created=i) for i in range(50)]
        before = store.transactions

        await asyncio.gather(
            *(store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 1)) for r in runs)
        )

        assert store.transactions - before == math.ceil(50 / 8)
        for r in runs:
            assert len(await store.read_events(r.run_id)) == 2
    finally:
        await store.close()


async def test_a_bad_request_fails_alone_and_its_batch_mates_commit(
    sqlite_store: SQLiteStore,
) -> None:
    runs = [await new_run(sqlite_store, created=i) for i in range(50)]
    taken = await sqlite_store.acquire(runs[10].run_id, owner="w", now=at(0), ttl_seconds=9)
    assert taken is not None
    duplicate = make_approval(runs[30].run_id)
    await sqlite_store.commit(runs[30].run_id, epoch=0, approvals=[duplicate])
    subs = {r.run_id: sqlite_store.subscribe(r.run_id) for r in runs}
    before = sqlite_store.transactions

    def request(i: int) -> Coroutine[Any, Any, object]:
        rid = runs[i].run_id
        if i == 20:  # a gap
            return sqlite_store.commit(rid, epoch=0, events=deltas(rid, 3, 1))
        if i == 30:  # valid events, an approval that exists: its events must be rolled back
            return sqlite_store.commit(
                rid, epoch=0, events=deltas(rid, 2, 2), approvals=[duplicate]
            )
        # i == 10 is stale: the run was acquired, epoch 1 now.
        return sqlite_store.commit(
            rid, epoch=0, events=deltas(rid, 2, 2), status="completed", audit=[make_audit(rid)]
        )

    results = await asyncio.gather(*(request(i) for i in range(50)), return_exceptions=True)

    assert sqlite_store.transactions - before == 1
    assert isinstance(results[10], StaleEpochError)
    assert isinstance(results[20], ConflictError)
    assert isinstance(results[30], ConflictError)
    failed = {10, 20, 30}
    assert all(results[i] is None for i in range(50) if i not in failed)
    for i, r in enumerate(runs):
        seqs = [e.seq for e in await sqlite_store.read_events(r.run_id)]
        published = [e.seq for e in await drain(subs[r.run_id])]
        stored = await sqlite_store.get_run(r.run_id)
        assert stored is not None
        if i in failed:
            assert seqs == [1]
            assert published == []
            assert stored.status == "running"
            assert stored.last_seq == 1
            assert await sqlite_store.audit_records(r.run_id) == []
        else:
            assert seqs == [1, 2, 3]
            assert published == [2, 3]
            assert stored.status == "completed"
            assert len(await sqlite_store.audit_records(r.run_id)) == 1


async def test_a_batch_that_cannot_start_fails_every_caller_and_publishes_nothing(
    db_path: Path,
) -> None:
    store = await SQLiteStore.open(db_path, busy_timeout_ms=0)
    try:
        runs = [await new_run(store, created=i) for i in range(3)]
        subs = [store.subscribe(r.run_id) for r in runs]
        with raw(db_path) as blocker:
            blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            results = await asyncio.gather(
                *(store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 1)) for r in runs),
                return_exceptions=True,
            )
            blocker.execute("ROLLBACK")

        assert all(type(r) is StoreError for r in results)
        assert all(not isinstance(r, sqlite3.Error) for r in results)
        assert all(isinstance(r, BaseException) and r.__cause__ for r in results)
        assert [await drain(s) for s in subs] == [[], [], []]
        for r in runs:
            assert len(await store.read_events(r.run_id)) == 1
        # The lock is gone: the same commits now succeed.
        await asyncio.gather(
            *(store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 1)) for r in runs)
        )
        for r in runs:
            assert len(await store.read_events(r.run_id)) == 2
    finally:
        await store.close()


async def test_listeners_get_events_only_once_another_connection_can_read_them(
    sqlite_store: SQLiteStore, db_path: Path
) -> None:
    run = await new_run(sqlite_store)
    sub = sqlite_store.subscribe(run.run_id)
    visible: list[tuple[int, int]] = []

    async def listen() -> None:
        with raw(db_path) as reader:
            async for event in sub:
                (last,) = reader.execute(
                    "SELECT max(seq) FROM events WHERE run_id = ?", (str(run.run_id),)
                ).fetchone()
                visible.append((event.seq, last))

    listener = asyncio.create_task(listen())
    for seq in range(2, 6):
        await sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, seq, 1))
    sub.close()
    async with asyncio.timeout(TIMEOUT):
        await listener

    assert [seq for seq, _ in visible] == [2, 3, 4, 5]
    assert all(last >= seq for seq, last in visible)


async def test_close_writes_the_commits_still_queued(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)
    run = await new_run(store)

    # The commit task queues its request; the close task runs before the scheduled flush.
    await asyncio.gather(
        store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 2)), store.close()
    )

    reopened = await SQLiteStore.open(db_path)
    try:
        assert [e.seq for e in await reopened.read_events(run.run_id)] == [1, 2, 3]
    finally:
        await reopened.close()


async def test_a_commit_cancelled_before_its_flush_is_not_written(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    commit = asyncio.ensure_future(
        sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 1))
    )

    async def cancel() -> None:  # runs after the commit queued, before the flush
        commit.cancel()

    await asyncio.gather(cancel())
    with pytest.raises(asyncio.CancelledError):
        await commit
    await sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 1))

    assert [e.seq for e in await sqlite_store.read_events(run.run_id)] == [1, 2]


async def test_ledger_begin_is_written_with_a_full_sync(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)  # NORMAL
    try:
        run = await new_run(store)
        statements: list[str] = []
        conn = store._connection()
        conn.set_trace_callback(statements.append)
        await store.ledger_begin(make_ledger(run.run_id), epoch=0)
        conn.set_trace_callback(None)

        assert [re.split(r" \(| WHERE", s)[0] for s in statements] == [
            "PRAGMA synchronous = FULL",
            "BEGIN IMMEDIATE",
            "SELECT epoch FROM runs",  # the fencing, in the same transaction as the insert
            "INSERT INTO ledger",
            "COMMIT",
            "PRAGMA synchronous = NORMAL",
        ]
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL again
    finally:
        await store.close()


class SyncAtCommit:
    """The store's connection, wrapped: records ``PRAGMA synchronous`` at every COMMIT
    (0 OFF, 1 NORMAL, 2 FULL) and the statements executed (not those of ``executemany``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.levels: list[int] = []
        self.statements: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            self.levels.append(self._conn.execute("PRAGMA synchronous").fetchone()[0])
        self.statements.append(sql.split(" (")[0])
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def watch(store: SQLiteStore) -> SyncAtCommit:
    spy = SyncAtCommit(store._connection())
    store._conn = spy  # type: ignore[assignment]
    return spy


async def test_a_batch_whose_requests_all_succeed_or_are_refused_uses_no_savepoint(
    sqlite_store: SQLiteStore,
) -> None:
    runs = [await new_run(sqlite_store, created=i) for i in range(6)]
    taken = await sqlite_store.acquire(runs[1].run_id, owner="w", now=at(0), ttl_seconds=9)
    assert taken is not None
    spy = watch(sqlite_store)
    before = sqlite_store.transactions
    r = [run.run_id for run in runs]

    results = await asyncio.gather(
        sqlite_store.commit(r[0], epoch=0, events=deltas(r[0], 2, 2), status="completed"),
        sqlite_store.commit(r[1], epoch=0, events=deltas(r[1], 2, 1)),  # stale
        sqlite_store.commit(r[2], epoch=0, events=deltas(r[2], 3, 1)),  # a gap
        sqlite_store.commit(r[3], epoch=0, events=[*deltas(r[3], 2, 1), *deltas(r[3], 4, 1)]),
        sqlite_store.commit(uuid4(), epoch=0),  # no such run
        sqlite_store.commit(r[4], epoch=0, audit=[make_audit(r[4])]),  # no events: checked too
        sqlite_store.commit(r[5], epoch=0, events=deltas(r[0], 2, 1)),  # another run's event
        return_exceptions=True,
    )

    assert sqlite_store.transactions - before == 1
    assert not any(s.startswith(("SAVEPOINT", "ROLLBACK")) for s in spy.statements)
    assert results[0] is None
    assert results[5] is None
    assert isinstance(results[1], StaleEpochError)
    assert isinstance(results[2], ConflictError)
    assert "expected seq 2, got 3" in str(results[2])
    assert isinstance(results[3], ConflictError)
    assert "expected seq 3, got 4" in str(results[3])
    assert type(results[4]) is StoreError
    assert "does not exist" in str(results[4])
    assert isinstance(results[6], ConflictError)
    assert "appended to run" in str(results[6])
    assert [e.seq for e in await sqlite_store.read_events(r[0])] == [1, 2, 3]
    stored = await sqlite_store.get_run(r[0])
    assert stored is not None
    assert (stored.status, stored.last_seq, stored.updated_at) == ("completed", 3, at(1.003))
    for i in (1, 2, 3, 5):
        assert [e.seq for e in await sqlite_store.read_events(r[i])] == [1]
        refused = await sqlite_store.get_run(r[i])
        assert refused is not None
        assert refused.last_seq == 1
    assert len(await sqlite_store.audit_records(r[4])) == 1


async def test_a_stale_epoch_wins_over_bad_seqs_as_it_always_did(sqlite_store: SQLiteStore) -> None:
    run = await new_run(sqlite_store)
    await sqlite_store.acquire(run.run_id, owner="w", now=at(0), ttl_seconds=9)

    with pytest.raises(StaleEpochError):
        await sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 7, 1))
    with pytest.raises(StaleEpochError):
        await sqlite_store.commit(run.run_id, epoch=0, events=deltas(uuid4(), 2, 1))
    with pytest.raises(ConflictError, match="already exists"):  # exists wins over bad seqs
        await sqlite_store.create_run(run, deltas(run.run_id, 2, 1))
    with pytest.raises(ConflictError, match="expected seq 1, got 2"):
        await sqlite_store.create_run(make_run(run_id=(rid := uuid4())), deltas(rid, 2, 1))
    assert await sqlite_store.get_run(rid) is None


async def test_a_request_that_fails_after_writing_rolls_the_batch_back_and_redoes_it(
    sqlite_store: SQLiteStore,
) -> None:
    runs = [await new_run(sqlite_store, created=i) for i in range(4)]
    duplicate = make_approval(runs[2].run_id)
    await sqlite_store.commit(runs[2].run_id, epoch=0, approvals=[duplicate])
    subs = [sqlite_store.subscribe(r.run_id) for r in runs]
    spy = watch(sqlite_store)
    before = sqlite_store.transactions
    r = [run.run_id for run in runs]

    results = await asyncio.gather(
        sqlite_store.commit(r[0], epoch=0, events=deltas(r[0], 2, 2), audit=[make_audit(r[0])]),
        sqlite_store.commit(r[1], epoch=0, events=deltas(r[1], 3, 1)),  # refused: a gap
        # its run row and events are written before its approval fails: undone
        sqlite_store.commit(r[2], epoch=0, events=deltas(r[2], 2, 1), approvals=[duplicate]),
        sqlite_store.commit(r[3], epoch=0, events=deltas(r[3], 2, 1), status="completed"),
        sqlite_store.ledger_finish("missing", status="done", at=at(1)),  # refused
        return_exceptions=True,
    )

    assert sqlite_store.transactions - before == 1  # the rolled-back attempt does not count
    assert spy.statements.count("BEGIN IMMEDIATE") == 2
    assert "ROLLBACK" in spy.statements
    assert spy.statements.count("SAVEPOINT fiduciary_op") == 5
    assert spy.statements.count("COMMIT") == 1
    assert results[0] is None
    assert results[3] is None
    assert isinstance(results[1], ConflictError)
    assert isinstance(results[2], ConflictError)
    assert "approval" in str(results[2])
    assert type(results[4]) is StoreError
    assert "no ledger entry" in str(results[4])
    published = [[e.seq for e in await drain(s)] for s in subs]
    assert published == [[2, 3], [], [], [2]]
    assert [len(await sqlite_store.read_events(rid)) for rid in r] == [3, 1, 1, 2]
    stored = await sqlite_store.get_run(r[2])
    assert stored is not None
    assert stored.last_seq == 1
    assert len(await sqlite_store.audit_records(r[0])) == 1


async def test_a_ledger_begin_in_a_batch_of_commits_commits_it_with_a_full_sync(
    sqlite_store: SQLiteStore,
) -> None:
    runs = [await new_run(sqlite_store, created=i) for i in range(20)]
    spy = watch(sqlite_store)
    before = sqlite_store.transactions
    entry = make_ledger(runs[0].run_id)

    results = await asyncio.gather(
        *(sqlite_store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 2, 1)) for r in runs),
        sqlite_store.ledger_begin(entry, epoch=0),
    )
    # a batch without a ledger_begin: NORMAL
    await asyncio.gather(
        *(sqlite_store.commit(r.run_id, epoch=0, events=deltas(r.run_id, 3, 1)) for r in runs)
    )

    assert results[-1] is None
    assert sqlite_store.transactions - before == 2
    assert spy.levels == [2, 1]  # FULL at the batch's COMMIT, then NORMAL
    assert spy.statements[0] == "PRAGMA synchronous = FULL"
    assert spy.statements[spy.statements.index("COMMIT") + 1] == "PRAGMA synchronous = NORMAL"
    assert spy.execute("PRAGMA synchronous").fetchone() == (1,)
    assert await sqlite_store.ledger_get(entry.key) == entry
    for r in runs:
        assert len(await sqlite_store.read_events(r.run_id)) == 3


async def test_a_ledger_retry_in_a_batch_is_committed_with_a_full_sync(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    entry = make_ledger(run.run_id)
    await sqlite_store.ledger_begin(entry, epoch=0)
    await sqlite_store.ledger_finish(entry.key, status="failed", at=at(21), error="{}")
    spy = watch(sqlite_store)

    retried, renewed = await asyncio.gather(
        sqlite_store.ledger_retry(entry.key, at=at(30)),
        sqlite_store.renew(run.run_id, epoch=0, now=at(30), ttl_seconds=5),
    )
    await sqlite_store.ledger_finish(entry.key, status="done", at=at(31))

    assert (retried, renewed) == (True, False)  # renew: there is no lease to renew
    assert spy.levels == [2, 1]


async def test_a_ledger_begin_after_a_takeover_in_its_batch_is_refused_alone(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    stale = make_ledger(run.run_id, key="k:stale")
    fresh = make_ledger(run.run_id, key="k:fresh")
    before = sqlite_store.transactions

    results = await asyncio.gather(
        sqlite_store.acquire(run.run_id, owner="w2", now=at(1), ttl_seconds=30),  # epoch 1
        sqlite_store.ledger_begin(stale, epoch=0),
        sqlite_store.ledger_begin(fresh, epoch=1),
        return_exceptions=True,
    )

    assert sqlite_store.transactions - before == 1
    assert isinstance(results[0], RunRecord)
    assert isinstance(results[1], StaleEpochError)
    assert results[2] is None
    assert await sqlite_store.ledger_get("k:stale") is None
    assert await sqlite_store.ledger_get("k:fresh") == fresh


async def test_ledger_begin_of_an_existing_key_in_a_batch_returns_the_existing_row(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    first = make_ledger(run.run_id, key="k")
    second = replace(first, tool_use_id="toolu_99", started_at=at(99))
    earlier = make_ledger(run.run_id, key="k:earlier")
    await sqlite_store.ledger_begin(earlier, epoch=0)
    await sqlite_store.ledger_finish("k:earlier", status="done", at=at(21), result={"ok": 1})
    before = sqlite_store.transactions

    results = await asyncio.gather(
        sqlite_store.ledger_begin(first, epoch=0),
        sqlite_store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 2, 1)),
        sqlite_store.ledger_begin(second, epoch=0),  # same key, same batch: the first one's row
        sqlite_store.ledger_begin(replace(earlier, started_at=at(50)), epoch=0),
    )

    assert sqlite_store.transactions - before == 1
    done = replace(earlier, status="done", finished_at=at(21), result={"ok": 1})
    assert list(results) == [None, None, first, done]
    assert await sqlite_store.ledger_get("k") == first


async def test_two_acquires_of_one_run_in_one_tick_give_the_lease_to_exactly_one(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    before = sqlite_store.transactions

    a, b = await asyncio.gather(
        sqlite_store.acquire(run.run_id, owner="w1", now=at(0), ttl_seconds=30),
        sqlite_store.acquire(run.run_id, owner="w2", now=at(0), ttl_seconds=30),
    )

    assert sqlite_store.transactions - before == 1
    assert a is not None
    assert b is None
    assert (a.lease_owner, a.epoch, a.lease_until) == ("w1", 1, at(30))
    assert await sqlite_store.get_run(run.run_id) == a
    # the same owner twice in one tick: each call gets its own new epoch, in order
    c, d = await asyncio.gather(
        sqlite_store.acquire(run.run_id, owner="w1", now=at(1), ttl_seconds=30),
        sqlite_store.acquire(run.run_id, owner="w1", now=at(2), ttl_seconds=30),
    )
    assert c is not None
    assert d is not None
    assert (c.epoch, d.epoch, d.lease_until) == (2, 3, at(32))


async def test_writes_of_every_kind_in_one_tick_share_one_transaction(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    fresh = make_run(created=1)
    approval = make_approval(run.run_id)
    await sqlite_store.commit(run.run_id, epoch=0, approvals=[approval])
    entry = make_ledger(run.run_id)
    approved = approval.with_(status="approved", decided_by="alice", decided_at=at(60))
    before = sqlite_store.transactions
    sub = sqlite_store.subscribe(fresh.run_id)

    results = await asyncio.gather(
        sqlite_store.create_run(fresh, [started(fresh.run_id)]),
        sqlite_store.commit(fresh.run_id, epoch=0, events=deltas(fresh.run_id, 2, 1)),
        sqlite_store.acquire(run.run_id, owner="w", now=at(0), ttl_seconds=10),
        sqlite_store.renew(run.run_id, epoch=1, now=at(5), ttl_seconds=10),
        sqlite_store.decide_approval(approved),
        sqlite_store.decide_approval(approval.with_(status="denied")),  # no longer pending
        sqlite_store.ledger_begin(entry, epoch=1),
        sqlite_store.ledger_finish(entry.key, status="done", at=at(21), result={"ok": True}),
        sqlite_store.ledger_retry(entry.key, at=at(22)),  # done, not failed
        sqlite_store.release(run.run_id, epoch=1),
    )

    assert sqlite_store.transactions - before == 1
    leased = results[2]
    assert isinstance(leased, RunRecord)
    assert leased.epoch == 1
    assert results[:2] == [None, None]
    assert results[3:] == [True, True, False, None, None, False, None]
    assert [e.seq for e in await drain(sub)] == [1, 2]
    stored = await sqlite_store.get_run(run.run_id)
    assert stored is not None
    assert (stored.epoch, stored.lease_owner, stored.lease_until) == (1, None, None)
    assert await sqlite_store.get_approval(approval.approval_id) == approved
    ledger = await sqlite_store.ledger_get(entry.key)
    assert ledger is not None
    assert ledger.status == "done"


async def test_a_cancelled_acquire_is_skipped_but_a_cancelled_release_is_written(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    lease = await sqlite_store.acquire(run.run_id, owner="w1", now=at(0), ttl_seconds=30)
    assert lease is not None
    release = asyncio.ensure_future(sqlite_store.release(run.run_id, epoch=lease.epoch))
    acquire = asyncio.ensure_future(
        sqlite_store.acquire(run.run_id, owner="w2", now=at(1), ttl_seconds=30)
    )

    async def cancel() -> None:  # runs after both queued, before the flush
        release.cancel()
        acquire.cancel()

    await asyncio.gather(cancel())
    for task in (release, acquire):
        with pytest.raises(asyncio.CancelledError):
            await task

    stored = await sqlite_store.get_run(run.run_id)
    assert stored is not None
    assert (stored.epoch, stored.lease_owner) == (lease.epoch, None)  # released, not taken


async def test_close_writes_the_ledger_writes_still_queued(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path)
    run = await new_run(store)
    entry = make_ledger(run.run_id)

    begun, _ = await asyncio.gather(store.ledger_begin(entry, epoch=0), store.close())

    assert begun is None
    reopened = await SQLiteStore.open(db_path)
    try:
        assert await reopened.ledger_get(entry.key) == entry
    finally:
        await reopened.close()


async def test_the_common_queries_use_indexes(sqlite_store: SQLiteStore) -> None:
    run = await new_run(sqlite_store)
    statements: list[str] = []
    conn = sqlite_store._connection()
    conn.set_trace_callback(statements.append)
    await sqlite_store.read_events(run.run_id, after_seq=1)
    await sqlite_store.list_runs(principal="alice")
    await sqlite_store.list_runs(status="running")
    await sqlite_store.list_runs()
    await sqlite_store.runs_to_resume(now=at(0))
    await sqlite_store.list_approvals(principal="alice", status="pending")
    await sqlite_store.list_approvals(run_id=run.run_id)
    await sqlite_store.list_approvals(status="pending")
    await sqlite_store.audit_records(run.run_id)
    await sqlite_store.autonomous_spend("alice", since=at(0))
    conn.set_trace_callback(None)

    plans = [
        " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        for sql in statements
    ]
    assert len(plans) == 11
    assert plans[0] == "SEARCH events USING INDEX events_by_run (run_id=? AND seq>?)"
    for sql, plan in zip(statements, plans, strict=True):
        assert "SCAN" not in plan.replace("SCAN runs USING INDEX", ""), (sql, plan)
        assert "TEMP B-TREE" not in plan, (sql, plan)


# --- errors -------------------------------------------------------------------------------


async def test_a_path_in_a_missing_directory_raises_store_error(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "dir" / "db.sqlite3"

    with pytest.raises(StoreError) as opened:
        await SQLiteStore.open(path)
    assert not isinstance(opened.value, sqlite3.Error)
    assert isinstance(opened.value.__cause__, sqlite3.Error)

    lazy = SQLiteStore(path)
    with pytest.raises(StoreError):
        await lazy.get_run(uuid4())
    await lazy.close()


@pytest.fixture
def not_a_database(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not a database, just some text\n" * 200)
    return path


async def test_a_file_that_is_not_a_database_raises_store_error(not_a_database: Path) -> None:
    with pytest.raises(StoreError) as opened:
        await SQLiteStore.open(not_a_database)
    assert isinstance(opened.value.__cause__, sqlite3.DatabaseError)


async def test_naive_datetimes_are_refused(sqlite_store: SQLiteStore) -> None:
    run = make_run()
    naive = replace(run, created_at=run.created_at.replace(tzinfo=None))

    with pytest.raises(StoreError):
        await sqlite_store.create_run(naive)
    assert await sqlite_store.get_run(run.run_id) is None


async def test_values_that_are_not_json_are_stored_in_their_json_form(
    sqlite_store: SQLiteStore,
) -> None:
    run = await new_run(sqlite_store)
    await sqlite_store.ledger_begin(make_ledger(run.run_id, key="k"), epoch=0)

    await sqlite_store.ledger_finish(
        "k", status="done", at=at(1), result={"amount": Decimal("1.50"), "run": run.run_id}
    )

    entry = await sqlite_store.ledger_get("k")
    assert entry is not None
    assert entry.result == {"amount": "1.50", "run": str(run.run_id)}
    with pytest.raises(StoreError):
        await sqlite_store.ledger_finish("k", status="done", at=at(2), result=object())


def test_constructor_arguments_are_checked(db_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(db_path, synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size"):
        SQLiteStore(db_path, batch_size=0)


async def test_full_synchronous_mode_is_applied(db_path: Path) -> None:
    store = await SQLiteStore.open(db_path, synchronous="FULL")
    try:
        assert store._connection().execute("PRAGMA synchronous").fetchone() == (2,)
        run = await new_run(store)
        await store.ledger_begin(make_ledger(run.run_id), epoch=0)
        assert store._connection().execute("PRAGMA synchronous").fetchone() == (2,)
    finally:
        await store.close()


# --- schema and migrations ----------------------------------------------------------------


def _normalize_sql(sql: str) -> str:
    # (ALTER TABLE ... ADD COLUMN stores its column as "\n, name TYPE)")
    without_comments = re.sub(r"--[^\n]*", "", sql)
    spaced = re.sub(r"\s+", " ", without_comments)
    return spaced.replace("( ", "(").replace(" )", ")").replace(" ,", ",").strip()


def _schema_of(conn: sqlite3.Connection) -> dict[str, Any]:
    objects = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    ).fetchall()
    details: dict[str, Any] = {}
    for kind, name, _table, _sql in objects:
        if kind == "table":
            details[name] = {
                "columns": conn.execute(f"PRAGMA table_xinfo({name})").fetchall(),
                "indexes": sorted(conn.execute(f"PRAGMA index_list({name})").fetchall()),
                "foreign_keys": conn.execute(f"PRAGMA foreign_key_list({name})").fetchall(),
            }
        elif kind == "index":
            details[name] = conn.execute(f"PRAGMA index_xinfo({name})").fetchall()
    return {
        "objects": [(k, n, t, _normalize_sql(s or "")) for k, n, t, s in objects],
        "details": details,
    }


def test_schema_sql_equals_the_migrations_applied_in_order(tmp_path: Path) -> None:
    with raw(tmp_path / "from_schema.sqlite3") as from_schema:
        from_schema.executescript(SCHEMA_PATH.read_text(encoding="utf-8"))
        expected = _schema_of(from_schema)
    with raw(tmp_path / "from_migrations.sqlite3") as migrated:
        applied = apply_migrations(migrated)
        actual = _schema_of(migrated)
        rows = migrated.execute("SELECT version, name FROM schema_migrations").fetchall()

    assert applied == [m.version for m in load_migrations()]
    assert rows == [(m.version, m.name) for m in load_migrations()]
    assert actual == expected
    tables = {n for k, n, _t, _s in expected["objects"] if k == "table"}
    assert {"runs", "events", "approvals", "ledger", "audit", "schema_migrations"} <= tables


def test_money_columns_are_text_never_real(tmp_path: Path) -> None:
    with raw(tmp_path / "db.sqlite3") as conn:
        apply_migrations(conn)
        for table in ("approvals", "audit"):
            columns = {c[1]: c[2] for c in conn.execute(f"PRAGMA table_info({table})")}
            assert columns["amount_usd"] == "TEXT"


def test_the_shipped_migrations_are_numbered_from_one(tmp_path: Path) -> None:
    migrations = load_migrations(MIGRATIONS_DIR)
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert migrations[0].name == "initial"
    for migration in migrations:
        assert split_statements(migration.sql)


def test_migrations_apply_in_order_only_once(tmp_path: Path) -> None:
    first = Migration(1, "one", "CREATE TABLE a (x INTEGER);\nINSERT INTO a VALUES (1);")
    second = Migration(2, "two", "-- add a column\nALTER TABLE a ADD COLUMN y TEXT;\n")
    with raw(tmp_path / "db.sqlite3") as conn:
        assert apply_migrations(conn, [first]) == [1]
        assert apply_migrations(conn, [first]) == []
        assert apply_migrations(conn, [first, second]) == [2]
        assert apply_migrations(conn, [first, second]) == []
        assert conn.execute("SELECT x, y FROM a").fetchall() == [(1, None)]
        assert conn.execute("SELECT version, name FROM schema_migrations").fetchall() == [
            (1, "one"),
            (2, "two"),
        ]


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    good = Migration(1, "good", "CREATE TABLE a (x INTEGER);")
    bad = Migration(2, "bad", "CREATE TABLE b (x INTEGER);\nINSERT INTO nowhere VALUES (1);")
    with raw(tmp_path / "db.sqlite3") as conn:
        apply_migrations(conn, [good])
        with pytest.raises(StoreError):
            apply_migrations(conn, [good, bad])
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "b" not in names
        assert conn.execute("SELECT version FROM schema_migrations").fetchall() == [(1,)]
        assert not conn.in_transaction


async def test_a_database_newer_than_the_code_is_refused(db_path: Path) -> None:
    await (await SQLiteStore.open(db_path)).close()
    with raw(db_path) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (9999, 'from_the_future', '2030-01-01')")

    with pytest.raises(StoreError, match="newer"):
        await SQLiteStore.open(db_path)


def test_badly_named_or_numbered_migrations_are_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_first.sql").write_text("SELECT 1;")
    (tmp_path / "0003_third.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match="without gaps"):
        load_migrations(tmp_path)
    (tmp_path / "0003_third.sql").unlink()
    (tmp_path / "2-second.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match="NNNN_name"):
        load_migrations(tmp_path)


def test_split_statements() -> None:
    script = "-- a comment; with a semicolon\nCREATE TABLE t (a TEXT DEFAULT ';');\n\n" + (
        "INSERT INTO t VALUES ('x');\n-- trailing comment\n"
    )
    assert split_statements(script) == [
        "-- a comment; with a semicolon\nCREATE TABLE t (a TEXT DEFAULT ';');",
        "INSERT INTO t VALUES ('x');",
    ]
    with pytest.raises(StoreError, match="incomplete"):
        split_statements("CREATE TABLE t (a TEXT")


# --- encoding -----------------------------------------------------------------------------

aware_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.integers(min_value=-23 * 60, max_value=23 * 60).map(
        lambda minutes: timezone(timedelta(minutes=minutes))
    ),
)


@given(aware_datetimes, aware_datetimes)
def test_stored_times_order_as_text_like_the_instants(a: datetime, b: datetime) -> None:
    assert (_ts(a) < _ts(b)) == (a < b)
    assert (_ts(a) == _ts(b)) == (a == b)
    assert _dt(_ts(a)) == a
    assert _dt(_ts(a)).utcoffset() == timedelta(0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None)
@given(
    args=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    amount=st.decimals(allow_nan=False, allow_infinity=False, places=6),
    text=st.text(),
)
def test_approvals_and_events_round_trip_any_json_and_decimal(
    args: dict[str, Any], amount: Decimal, text: str
) -> None:
    async def scenario() -> None:
        store = await SQLiteStore.open(":memory:")
        try:
            run = make_run()
            approval = replace(make_approval(run.run_id), args=args, amount_usd=amount)
            event = TextDelta(run_id=run.run_id, seq=1, at=at(1), text=text)
            await store.create_run(run, [event])
            await store.commit(run.run_id, epoch=0, approvals=[approval])

            stored = await store.get_approval(approval.approval_id)
            assert stored == approval
            assert stored is not None
            assert str(stored.amount_usd) == str(amount)
            assert json.dumps(stored.args) == json.dumps(args)
            assert await store.read_events(run.run_id) == [event]
        finally:
            await store.close()

    asyncio.run(scenario())


def test_stored_times_are_utc_text_with_microseconds() -> None:
    moment = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    assert _ts(moment) == "2026-03-01T10:00:00.000000+00:00"
    assert _dt(_ts(moment)) == moment.astimezone(UTC)
