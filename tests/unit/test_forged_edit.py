"""An approved row rewritten with raw SQL to look like a person's edit: its amount changed in
``approved_args`` (as the JSON string a real edit stores) with a matching digest. The log shows
only what was proposed, so the executor prices the approved arguments again: an amount that is
not the row's, or a tier the row lacks, runs nothing (``tampered``); an honest edit runs."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from fiduciary import ManualClock, PendingAction, ToolCallRejected
from fiduciary.capabilities import args_digest
from fiduciary.events import ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore
from fiduciary.testing import Call, Reply, Script, ToolCalls, collect

from .conftest import Effects, make_agent

pytestmark = pytest.mark.timeout(30)


def rewrite(db: Path, approval_id: str, columns: dict[str, Any]) -> None:
    sets = ", ".join(f"{c} = ?" for c in columns)
    with sqlite3.connect(db) as conn:
        cur = conn.execute(
            f"UPDATE approvals SET {sets} WHERE approval_id = ?", [*columns.values(), approval_id]
        )
        assert cur.rowcount == 1


@pytest.mark.parametrize(
    "forged",
    [
        "amount_only",  # approved_args and digest rewritten, the row's amount left
        "amount_and_price",  # the row's amount rewritten too: the tier gives it away
    ],
)
async def test_a_forged_edit_of_the_amount_runs_nothing(tmp_path: Path, forged: str) -> None:
    db = tmp_path / "runs.sqlite3"
    store, clock, effects = SQLiteStore(db), ManualClock(), Effects()
    try:
        script = Script(
            "pay", [ToolCalls([Call("send", {"to": "bob", "amount": "150"})]), Reply("done")]
        )
        agent = make_agent(effects, store, clock, script)
        events = await collect(agent.run("pay bob", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        assert pending.tier == "confirm"
        decided = await agent.approve(pending.approval_id, by="alice")
        assert decided.approved_args is not None
        evil = {**decided.approved_args, "amount": "5000"}  # a string, as an edit stores it
        columns: dict[str, Any] = {
            "approved_args": json.dumps(evil),
            "approved_digest": args_digest(evil),
        }
        if forged == "amount_and_price":
            columns["amount_usd"] = "5000"
        rewrite(db, str(pending.approval_id), columns)
        more = await collect(agent.resume(pending.run_id))
        assert effects.payments == []
        (rejected,) = [e for e in more if isinstance(e, ToolCallRejected)]
        assert rejected.reason == "tampered"
        assert not [e for e in more if isinstance(e, ToolCallEnd)]
        audit = await store.audit_records(pending.run_id)
        assert any(a.outcome == "rejected:tampered" for a in audit)
    finally:
        await store.close()


async def test_an_honest_edit_of_the_amount_runs(tmp_path: Path) -> None:
    store, clock, effects = SQLiteStore(tmp_path / "runs.sqlite3"), ManualClock(), Effects()
    try:
        script = Script(
            "pay", [ToolCalls([Call("send", {"to": "bob", "amount": "150"})]), Reply("done")]
        )
        agent = make_agent(effects, store, clock, script)
        events = await collect(agent.run("pay bob", principal="alice"))
        (pending,) = [e for e in events if isinstance(e, PendingAction)]
        await agent.approve(pending.approval_id, by="alice", edits={"amount": "120"})
        await collect(agent.resume(pending.run_id))
        assert [p["amount"] for p in effects.payments] == [Decimal(120)]
    finally:
        await store.close()
