"""Migrations of the SQLite schema that rebuild a table: what a file had is kept."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from decimal import Decimal
from pathlib import Path

from fiduciary.stores._sql.sqlite_writer import CODEC, QUERIES, ts
from fiduciary.stores.sqlite import SQLiteStore, apply_migrations, load_migrations
from tests.contract.builders import at, make_audit, make_run


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path, isolation_level=None, timeout=5)) as conn:
        yield conn


async def test_migration_0006_keeps_the_audit_ids_and_the_next_follows_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v5.sqlite3"
    run = make_run()
    old = [
        make_audit(run.run_id, tool_use_id="toolu_a", when=1.0),  # counts: auto, ok, 0.10
        make_audit(run.run_id, tool_use_id="toolu_b", when=2.0, amount_usd=None),  # a read
        make_audit(run.run_id, tool_use_id="toolu_c", when=3.0, outcome="error"),
    ]
    with raw(path) as conn:
        assert apply_migrations(conn, load_migrations()[:5]) == [1, 2, 3, 4, 5]
        conn.execute(
            "INSERT INTO runs (run_id, principal, status, created_at, updated_at) "
            "VALUES (?, 'alice', 'running', ?, ?)",
            (str(run.run_id), ts(run.created_at), ts(run.created_at)),
        )
        for record, id_ in zip(old, (9, 3, 7), strict=True):  # ids out of time order
            conn.execute(
                "INSERT INTO audit (id, run_id, at, principal, capability, kind, tool_use_id, "
                "outcome, tier, amount_usd, input, output, idempotency_key, duration_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (id_, *CODEC.audit_row(record)),
            )
    store = await SQLiteStore.open(path)
    try:
        assert await store.audit_records(run.run_id) == [old[1], old[2], old[0]]  # by id
        assert await store.autonomous_spend("alice", since=at(0)) == Decimal("0.10")
        new = make_audit(run.run_id, tool_use_id="toolu_d", when=0.5)
        await store.commit(run.run_id, epoch=0, audit=[new])
        assert (await store.audit_records(run.run_id))[-1] == new  # id 10: after every old one
        assert await store.autonomous_spend("alice", since=at(0)) == Decimal("0.20")
        conn = store._connection()
        assert conn.execute("SELECT max(id) FROM audit").fetchone() == (10,)
        assert conn.execute("SELECT * FROM sqlite_sequence").fetchall() == []
        # the spend query reads its rows through the partial indexes
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN {QUERIES.autonomous_spend}", {"principal": "a", "since": "x"}
        ).fetchall()
        details = " / ".join(row[-1] for row in plan)
        assert "USING INDEX audit_by_principal_at" in details
        assert "USING INDEX audit_by_key" in details
    finally:
        await store.close()
