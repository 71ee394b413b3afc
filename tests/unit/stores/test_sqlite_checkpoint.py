"""The SQLite store's WAL checkpoints, on a thread of their own (``_sql/sqlite_checkpoint.py``)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

from fiduciary.stores._sql.sqlite_checkpoint import BOUND_PAGES, Checkpointer
from fiduciary.stores.sqlite import SQLiteStore
from tests.contract.builders import deltas, make_run, started

TIMEOUT = 10.0


def checkpointer(store: SQLiteStore) -> Checkpointer:
    found = store._checkpointer
    assert found is not None
    return found


async def append(store: SQLiteStore, count: int) -> list[int]:
    """A run with ``count`` more events after its first, one commit each; their seqs."""
    run = make_run()
    await store.create_run(run, [started(run.run_id)])
    for seq in range(2, count + 2):
        await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, seq, 1))
    return list(range(1, count + 2))


def events_in_database_file(db: Path, copy: Path) -> int:
    """The events found in the database file alone (its WAL left out)."""
    shutil.copyfile(db, copy)
    with closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as conn:
        count: int = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        return count


async def test_the_store_connection_checkpoints_only_as_a_bound(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "db.sqlite3")
    try:
        conn = store._connection()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (BOUND_PAGES,)
        await append(store, 3)
        assert checkpointer(store)._thread is None  # a few rows: no thread started
    finally:
        await store.close()


async def test_commits_wake_a_checkpoint_on_a_thread_of_its_own(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    store = await SQLiteStore.open(db)
    try:
        checkpointer(store).every_changes = 1
        await append(store, 5)

        assert checkpointer(store).wait_caught_up(TIMEOUT)
        thread = checkpointer(store)._thread
        assert thread is not None
        assert thread.is_alive()
        # the commits reached the database file itself: the WAL was copied into it
        assert events_in_database_file(db, tmp_path / "copy.sqlite3") == 6
    finally:
        await store.close()


async def test_close_stops_the_thread_and_checkpoints(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    store = await SQLiteStore.open(db)
    checkpointer(store).every_changes = 1
    await append(store, 3)
    assert checkpointer(store).wait_caught_up(TIMEOUT)
    thread = checkpointer(store)._thread
    assert thread is not None
    other = await SQLiteStore.open(db)  # still open: closing `store` is not the last close
    try:
        await append(store, 2)  # committed after the thread's checkpoint
        await store.close()

        assert not thread.is_alive()
        assert events_in_database_file(db, tmp_path / "copy.sqlite3") == 7
        assert len(await other.list_runs()) == 2
    finally:
        await other.close()


async def test_a_checkpoint_waits_for_no_reader_and_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite3"
    store = await SQLiteStore.open(db)
    try:
        checkpointer(store).every_changes = 1
        await append(store, 1)
        with closing(sqlite3.connect(db, isolation_level=None)) as reader:
            reader.execute("BEGIN")
            assert reader.execute("SELECT count(*) FROM events").fetchone() == (2,)
            await append(store, 3)  # checkpoints run while the reader holds its snapshot
            assert checkpointer(store).wait_caught_up(TIMEOUT)
            assert reader.execute("SELECT count(*) FROM events").fetchone() == (2,)
            reader.execute("COMMIT")
            assert reader.execute("SELECT count(*) FROM events").fetchone() == (6,)
    finally:
        await store.close()
    reopened = await SQLiteStore.open(db)
    try:
        assert len(await reopened.list_runs()) == 2
    finally:
        await reopened.close()


def test_a_kill_during_checkpoints_loses_no_commit(tmp_path: Path) -> None:
    """SIGKILL a process that commits (a checkpoint woken every commit) once it has reported
    200 commits: every commit it reported is in the file."""
    db = tmp_path / "db.sqlite3"
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from fiduciary.stores.sqlite import SQLiteStore
        from tests.contract.builders import deltas, make_run, started

        async def main():
            store = await SQLiteStore.open({str(db)!r})
            store._checkpointer.every_changes = 1
            while True:
                run = make_run()
                await store.create_run(run, [started(run.run_id)])
                for seq in range(2, 40):
                    await store.commit(run.run_id, epoch=0, events=deltas(run.run_id, seq, 1))
                    print(run.run_id, seq, flush=True)

        asyncio.run(main())
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[3],
    )
    reported: dict[str, int] = {}
    try:
        assert child.stdout is not None
        for _ in range(200):
            line = child.stdout.readline()
            assert line, "the child ended before it was killed"
            run_id, seq_text = line.split()
            reported[run_id] = int(seq_text)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=TIMEOUT)
        if child.stdout is not None:
            child.stdout.close()
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        rows = conn.execute("SELECT run_id, max(seq) FROM events GROUP BY run_id").fetchall()
        stored: dict[str, int] = dict(rows)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    for run_id, last in reported.items():
        assert stored[run_id] >= last
