"""The global order on SQLite: numbered in commit order by every process on the file, and the
events of a file older than migration 0004 numbered by time, each run's in seq order."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from uuid import UUID

import pytest

from fiduciary.stores._sql.sqlite_writer import ts
from fiduciary.stores.base import GlobalEvent
from fiduciary.stores.sqlite import SQLiteStore, apply_migrations, load_migrations
from tests.contract.builders import deltas, make_run, started


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path, isolation_level=None, timeout=5)) as conn:
        yield conn


def keys(events: list[GlobalEvent]) -> list[tuple[UUID, int]]:
    return [(g.event.run_id, g.event.seq) for g in events]


async def test_two_stores_on_one_file_number_their_events_in_one_order(tmp_path: Path) -> None:
    """Another process on the file (a CLI resuming a run beside a server) numbers its events
    in the same order; the server sees them by reading (no bell rings across processes)."""
    path = tmp_path / "runs.sqlite3"
    server, cli = await SQLiteStore.open(path), await SQLiteStore.open(path)
    try:
        a, b = make_run(), make_run()
        await server.create_run(a, [started(a.run_id)])
        await cli.create_run(b, [started(b.run_id)])
        await server.commit(a.run_id, epoch=0, events=deltas(a.run_id, 2, 2))
        await cli.commit(b.run_id, epoch=0, events=deltas(b.run_id, 2, 1))
        await server.commit(a.run_id, epoch=0, events=deltas(a.run_id, 4, 1))

        everything = (await server.read_global()).events
        assert keys(everything) == [
            (a.run_id, 1),
            (b.run_id, 1),
            (a.run_id, 2),
            (a.run_id, 3),
            (b.run_id, 2),
            (a.run_id, 4),
        ]
        assert [g.position for g in everything] == [1, 2, 3, 4, 5, 6]
        assert (await cli.read_global(after=4)).events == everything[4:]
    finally:
        await server.close()
        await cli.close()


async def test_events_written_before_the_migration_keep_their_time_order(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    a, b = make_run(), make_run()
    with raw(path) as conn:
        assert apply_migrations(conn, load_migrations()[:3]) == [1, 2, 3]
        for run in (a, b):
            conn.execute(
                "INSERT INTO runs (run_id, principal, status, created_at, updated_at) "
                "VALUES (?, 'alice', 'completed', ?, ?)",
                (str(run.run_id), ts(run.created_at), ts(run.created_at)),
            )
        # b's event is older than a's; a's seq 2 is stamped before its seq 1 (a clock that
        # went back): it still comes after it
        for event in (
            deltas(a.run_id, 1, 1, start=5.0)[0],
            deltas(a.run_id, 2, 1, start=0.5)[0],
            deltas(b.run_id, 1, 1, start=1.0)[0],
        ):
            conn.execute(
                "INSERT INTO events (run_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)",
                (str(event.run_id), event.seq, event.type, ts(event.at), event.model_dump_json()),
            )
    store = await SQLiteStore.open(path)
    try:
        everything = (await store.read_global()).events
        assert keys(everything) == [(b.run_id, 1), (a.run_id, 1), (a.run_id, 2)]
        assert [g.position for g in everything] == [1, 2, 3]
        run = make_run()
        await store.create_run(run, [started(run.run_id)])  # new numbers follow the old
        assert [
            (g.position, g.event.run_id) for g in (await store.read_global(after=3)).events
        ] == [(4, run.run_id)]
    finally:
        await store.close()


def test_the_global_order_is_the_rowid_given_by_the_insert(tmp_path: Path) -> None:
    """An insert numbers its event with no lookup of its own (the rowid, 0005); reading the
    order walks the table by rowid, each event's run found by its key."""
    from fiduciary.stores._sql.sqlite_writer import QUERIES

    with raw(tmp_path / "plan.sqlite3") as conn:
        apply_migrations(conn)
        insert = conn.execute(
            f"EXPLAIN QUERY PLAN {QUERIES.insert_event}", ("r", 1, "t", "x", "{}")
        ).fetchall()
        read = conn.execute(
            f"EXPLAIN QUERY PLAN {QUERIES.read_global}", {"after": 0, "limit": 10}
        ).fetchall()
    assert insert == []
    assert [row[-1] for row in read] == [
        "SEARCH e USING INTEGER PRIMARY KEY (rowid>?)",
        "SEARCH r USING INDEX sqlite_autoindex_runs_1 (run_id=?)",
    ]


async def test_migration_0005_keeps_every_number_and_the_next_follows_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v4.sqlite3"
    run = make_run()
    with raw(path) as conn:
        assert apply_migrations(conn, load_migrations()[:4]) == [1, 2, 3, 4]
        conn.execute(
            "INSERT INTO runs (run_id, principal, status, created_at, updated_at, last_seq) "
            "VALUES (?, 'alice', 'running', ?, ?, 2)",
            (str(run.run_id), ts(run.created_at), ts(run.created_at)),
        )
        for event, gseq in zip(deltas(run.run_id, 1, 2), (5, 9), strict=True):
            conn.execute(
                "INSERT INTO events (run_id, seq, type, at, payload, gseq) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    str(event.run_id),
                    event.seq,
                    event.type,
                    ts(event.at),
                    event.model_dump_json(),
                    gseq,
                ),
            )
    store = await SQLiteStore.open(path)
    try:
        assert [g.position for g in (await store.read_global()).events] == [5, 9]
        await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, 3, 1))
        assert [g.position for g in (await store.read_global(after=5)).events] == [9, 10]
        with raw(path) as conn, pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            conn.execute(
                "INSERT INTO events (run_id, seq, type, at, payload) VALUES (?, 3, 't', 'x', '')",
                (str(run.run_id),),
            )
    finally:
        await store.close()
