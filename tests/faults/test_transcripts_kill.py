"""The per-run JSONL transcript, outside-in: a process killed mid-run leaves a file that is a
prefix of the committed log (it may lag; it never holds an uncommitted event), the next
process with transcripts on brings it up to the log, and deleting it loses nothing."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fiduciary import ManualClock, encode_event
from fiduciary.events import RunCompleted, ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore

from .transcripts_child import agent

CHILD = Path(__file__).with_name("transcripts_child.py")

pytestmark = pytest.mark.timeout(120)


async def logged(store: SQLiteStore) -> list[str]:
    (run,) = await store.list_runs()
    return [encode_event(e) for e in await store.read_events(run.run_id)]


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


async def test_a_killed_process_leaves_a_prefix_and_the_next_one_catches_up(
    tmp_path: Path,
) -> None:
    db, directory = tmp_path / "runs.sqlite3", tmp_path / "transcripts"
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(db), str(directory)
    )
    assert await asyncio.wait_for(child.wait(), 60) == -9  # it died inside the write, as planned

    store = SQLiteStore(db, transcripts=directory)
    try:
        log = await logged(store)
        (run,) = await store.list_runs()
        path = directory / f"{run.run_id}.jsonl"
        written = lines(path)
        # committed events only, in order, byte for byte: a prefix of the log (maybe all of it)
        assert written == log[: len(written)]
        assert any('"tool_call_start"' in line and '"pay"' in line for line in log)

        # another process resumes the run once the dead one's lease ran out: the file follows
        # the log to its end
        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
        events = [e async for e in agent(store, die=False, clock=later).resume(run.run_id)]
        assert isinstance(events[-1], RunCompleted)
        [pay] = [e for e in events if isinstance(e, ToolCallEnd) and e.name == "pay"]
        assert pay.recovery == "unknown"  # never run twice: the ledger says it started
    finally:
        await store.close()  # the files are brought up to date before the store closes
    store = SQLiteStore(db, transcripts=directory)
    try:
        assert lines(path) == await logged(store)

        # deleting the file loses nothing: the log is the truth, the file is written again
        path.unlink()
        assert store.transcripts is not None
        last = await store.transcripts.catch_up(run.run_id)
        assert lines(path) == await logged(store)
        assert last == len(lines(path))
    finally:
        await store.close()


async def test_a_line_cut_by_a_crash_is_written_again(tmp_path: Path) -> None:
    db, directory = tmp_path / "runs.sqlite3", tmp_path / "transcripts"
    store = SQLiteStore(db, transcripts=directory)
    try:
        events = [
            e
            async for e in agent(store, die=False).run(
                "count to three, then pay", principal="alice"
            )
        ]
        run_id = events[0].run_id
    finally:
        await store.close()
    path = directory / f"{run_id}.jsonl"
    whole = path.read_text(encoding="utf-8")
    cut = whole[: whole.index("\n", len(whole) // 2) + 20]  # half, then a partial line
    path.write_text(cut, encoding="utf-8")
    store = SQLiteStore(db, transcripts=directory)
    try:
        assert store.transcripts is not None
        await store.transcripts.catch_up(run_id)
        assert path.read_text(encoding="utf-8") == whole
    finally:
        await store.close()
