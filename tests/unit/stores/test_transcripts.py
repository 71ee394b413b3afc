"""Transcript files on each SQL store: after a run and the store's close, the file is the log,
line for line; a store without the option writes none."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from fiduciary import encode_event
from fiduciary.stores.base import Store
from fiduciary.stores.postgres import PostgresStore
from fiduciary.stores.sqlite import SQLiteStore

from ...faults.transcripts_child import MESSAGE, agent


async def run_once(store: SQLiteStore | PostgresStore) -> UUID:
    events = [e async for e in agent(store, die=False).run(MESSAGE, principal="alice")]
    return events[0].run_id


async def logged(store: Store, run_id: UUID) -> list[str]:
    return [encode_event(e) for e in await store.read_events(run_id)]


async def test_sqlite(tmp_path: Path) -> None:
    directory = tmp_path / "transcripts"
    store = SQLiteStore(tmp_path / "runs.sqlite3", transcripts=directory)
    try:
        run_id = await run_once(store)
    finally:
        await store.close()
    reopened = SQLiteStore(tmp_path / "runs.sqlite3")  # (no transcripts: nothing is written)
    try:
        log = await logged(reopened, run_id)
    finally:
        await reopened.close()
    assert (directory / f"{run_id}.jsonl").read_text(encoding="utf-8").splitlines() == log
    assert [p.name for p in directory.iterdir()] == [f"{run_id}.jsonl"]


async def test_postgres(tmp_path: Path, postgres_dsn: str) -> None:
    directory = tmp_path / "transcripts"
    store = PostgresStore(postgres_dsn, transcripts=directory)
    try:
        run_id = await run_once(store)
    finally:
        await store.close()
    reopened = PostgresStore(postgres_dsn)
    try:
        log = await logged(reopened, run_id)
    finally:
        await reopened.close()
    assert (directory / f"{run_id}.jsonl").read_text(encoding="utf-8").splitlines() == log
