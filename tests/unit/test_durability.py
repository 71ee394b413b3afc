"""Durable runs on SQLite: across processes, before the first event, and through the ledger."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from uuid import UUID

from fiduciary.events import PendingAction, RunCompleted
from fiduciary.stores.sqlite import SQLiteStore

from . import scenario_payments as scenario

HERE = Path(__file__).parent


def _python(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.unit.scenario_payments", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=HERE.parent.parent,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


async def test_run_approved_from_a_second_process_completes_there(tmp_path: Path) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.sqlite3"
    run_id = await scenario._start(db, effects)  # this process suspends the run
    target = scenario.EffectTarget(effects)
    assert [e[1] for e in target.effects()] == ["plumber"]  # $3 auto; $150 waits
    out = json.loads(_python("approve", str(db), str(effects), run_id, "140"))
    assert out == {"status": "completed", "last": "run_completed"}
    assert target.effects()[0][1:] == ("landlord", "140")
    assert len(target.entries()) == 2  # each handler entered once
    store = SQLiteStore(db)
    events = await store.read_events(UUID(run_id))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[-1], RunCompleted)
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    assert pending.input == {"payee": "landlord", "amount": "150"}
    await store.close()


async def test_run_started_in_a_subprocess_is_durable_before_first_event(tmp_path: Path) -> None:
    db, effects = tmp_path / "runs.sqlite3", tmp_path / "effects.sqlite3"
    run_id = _python("start", str(db), str(effects))
    store = SQLiteStore(db)
    run = await store.get_run(UUID(run_id))
    assert run is not None
    assert run.status == "awaiting_approval"
    assert run.lease_owner is None  # the lease was released when the run suspended
    await store.close()
