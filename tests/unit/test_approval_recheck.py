"""The last check before an approved write runs: its arguments, as validated for the handler,
hash to the digest that was approved.

Another process rewrites the approved arguments in the database between the approval and the
resume, with the database's own client, and keeps the row self-consistent: the digest it
stores is the digest of the arguments it stores, and only the amount -- a field the person
could have edited -- changes. The binding checks pass such a row; what the handler would be
given (the validated arguments) does not hash to that digest, and nothing runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fiduciary import PendingAction, ToolCallRejected
from fiduciary.capabilities import args_digest
from fiduciary.events import ToolCallEnd
from fiduciary.stores.base import Store
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, ManualClock, Reply, Script, ToolCalls, collect

from ..postgres_support import new_database
from .conftest import Effects, make_agent

# run by another process: one UPDATE of the approvals row, through the database's own client
REWRITE = """
import json, sys
kind, where, approval_id, columns = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if kind == "sqlite":
    import sqlite3
    conn = sqlite3.connect(where)
    sets = ", ".join(f"{c} = ?" for c in columns)
    with conn:
        cur = conn.execute(
            f"UPDATE approvals SET {sets} WHERE approval_id = ?", [*columns.values(), approval_id]
        )
    conn.close()
else:
    import psycopg
    sets = ", ".join(f"{c} = %s" for c in columns)
    with psycopg.connect(where, autocommit=True) as conn:
        cur = conn.execute(
            f"UPDATE approvals SET {sets} WHERE approval_id = %s", [*columns.values(), approval_id]
        )
assert cur.rowcount == 1, cur.rowcount
"""


@dataclass
class Database:
    store: Store
    kind: str
    where: str  # the SQLite file or the PostgreSQL DSN

    def rewrite(self, approval_id: str, columns: dict[str, Any]) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                REWRITE,
                self.kind,
                self.where,
                approval_id,
                json.dumps(columns),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "runs.sqlite3"
        db = Database(SQLiteStore(path), "sqlite", str(path))
    else:
        from fiduciary.stores.postgres import PostgresStore

        dsn = await new_database()
        db = Database(await PostgresStore.open(dsn), "postgres", dsn)
    yield db
    await db.store.close()


async def test_approved_args_rewritten_by_another_process_before_the_resume_do_not_run(
    effects: Effects, database: Database, clock: ManualClock
) -> None:
    script = Script(
        "pay", [ToolCalls([Call("send", {"to": "bob", "amount": "700"})]), Reply("reported")]
    )
    agent = make_agent(effects, database.store, clock, script)
    events = await collect(agent.run("pay bob", principal="alice"))
    (pending,) = [e for e in events if isinstance(e, PendingAction)]
    await agent.approve(pending.approval_id, by="alice", confirm_amount="700")

    # 7000 as a JSON number: the row's digest is its arguments' digest, the field is editable
    rewritten = {**pending.input, "amount": 7000}
    assert "amount" in pending.modifiable_fields
    database.rewrite(
        str(pending.approval_id),
        {"approved_args": json.dumps(rewritten), "approved_digest": args_digest(rewritten)},
    )
    more = await collect(agent.resume(pending.run_id))

    assert effects.payments == []
    assert not [e for e in more if isinstance(e, ToolCallEnd)]
    (rejected,) = [e for e in more if isinstance(e, ToolCallRejected)]
    assert (rejected.reason, rejected.message) == (
        "denied",
        "The approved arguments do not match what was approved; not executed.",
    )
    audit = await database.store.audit_records(pending.run_id)
    assert [a.outcome for a in audit if a.outcome.startswith("rejected")] == ["rejected:denied"]
    run = await agent.get_run(pending.run_id)
    assert run.status == "completed"
