"""A refresh read cut off by a crash (its start committed, its end never) runs again when the
run resumes: every tool_call_start has its end, and the write itself is not run twice."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fiduciary import ManualClock
from fiduciary.events import RunCompleted, ToolCallEnd, ToolCallRejected, ToolCallStart
from fiduciary.stores.sqlite import SQLiteStore

from .refresh_child import agent

CHILD = Path(__file__).with_name("refresh_child.py")

pytestmark = pytest.mark.timeout(120)


async def test_a_refresh_cut_off_by_a_crash_runs_again_on_resume(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    child = await asyncio.create_subprocess_exec(sys.executable, str(CHILD), str(db))
    assert await asyncio.wait_for(child.wait(), 60) == -9

    store = SQLiteStore(db)
    try:
        (run,) = await store.list_runs()
        before = await store.read_events(run.run_id)
        [refresh] = [e for e in before if isinstance(e, ToolCallStart) and e.refresh_of]
        ended = {e.tool_use_id for e in before if isinstance(e, ToolCallEnd)}
        assert refresh.tool_use_id not in ended  # cut off between its start and its end
        assert refresh.refresh_of in ended  # the write it follows had ended

        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))  # the dead lease ran out
        events = [e async for e in agent(store, die=False, clock=later).resume(run.run_id)]
        assert isinstance(events[-1], RunCompleted)
        log = await store.read_events(run.run_id)
    finally:
        await store.close()
    starts = [e.tool_use_id for e in log if isinstance(e, ToolCallStart)]
    ends = [e for e in log if isinstance(e, ToolCallEnd)]
    assert sorted(starts) == sorted(e.tool_use_id for e in ends)  # every start has its end
    [again] = [e for e in ends if e.tool_use_id == refresh.tool_use_id]
    assert (again.recovery, again.is_error) == ("replayed", False)
    assert [e.name for e in ends].count("pay") == 1


async def test_a_cancel_ends_a_refresh_cut_off_by_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    child = await asyncio.create_subprocess_exec(sys.executable, str(CHILD), str(db))
    assert await asyncio.wait_for(child.wait(), 60) == -9
    store = SQLiteStore(db)
    try:
        (run,) = await store.list_runs()
        later = ManualClock(datetime.now(UTC) + timedelta(hours=1))
        await agent(store, die=False, clock=later).cancel(run.run_id, by="alice")
        log = await store.read_events(run.run_id)
    finally:
        await store.close()
    [refresh] = [e for e in log if isinstance(e, ToolCallStart) and e.refresh_of]
    [ended] = [e for e in log if isinstance(e, ToolCallRejected)]
    assert (ended.tool_use_id, ended.reason) == (refresh.tool_use_id, "cancelled")
