"""Two approvers in two processes at the same moment, on PostgreSQL: one decision, one
resume that executes, one execution (counted at the executor, in a file both processes
append to)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from fiduciary.events import PendingAction
from fiduciary.testing import collect
from tests.postgres_support import create_database, require_driver

from .dual_control_voter import dual_control_agent

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

require_driver()
from fiduciary.stores.postgres import PostgresStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


async def voter(*args: str) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.unit.dual_control_voter",
        *args,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    ready = await asyncio.wait_for(process.stdout.readline(), 30)
    assert ready == b"ready\n", ready + await process.stderr.read()  # type: ignore[union-attr]
    return process


async def test_two_approvers_in_two_processes_execute_once(tmp_path: Path) -> None:
    dsn = create_database()
    executions = tmp_path / "executions.txt"
    executions.touch()
    store = await PostgresStore.open(dsn)
    try:
        agent = dual_control_agent(store, executions)
        events = await collect(agent.run("send 150", principal="alice"))
        pending = next(e for e in events if isinstance(e, PendingAction))
        approval_id = str(pending.approval_id)
        bob = await voter(dsn, approval_id, "bob", str(executions))
        carol = await voter(dsn, approval_id, "carol", str(executions))
        for process in (bob, carol):
            assert process.stdin is not None
            process.stdin.write(b"go\n")
            await process.stdin.drain()
        outputs = []
        for process in (bob, carol):
            out, err = await asyncio.wait_for(process.communicate(), 40)
            assert process.returncode == 0, err.decode()
            outputs.append(out.decode())
        # each vote landed; whichever completed the set, both saw it approved
        assert all("voted approved" in o or "voted pending" in o for o in outputs), outputs
        assert any("voted approved" in o for o in outputs), outputs
        record = await store.get_approval(pending.approval_id)
        assert record is not None
        assert record.status == "approved"
        assert sorted((record.decided_by or "").split(", ")) == ["bob", "carol"]
        await collect(agent.resume(pending.run_id))  # whatever is left (nothing: it is done)
        assert len(executions.read_text().splitlines()) == 1
        run = await store.get_run(pending.run_id)
        assert run is not None
        assert run.status == "completed"
    finally:
        await store.close()
