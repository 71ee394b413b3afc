-- Migration 0006: fewer pages written per audit row and per ledger row.
--
-- - audit.id without AUTOINCREMENT: AUTOINCREMENT kept the highest id in sqlite_sequence, one
--   more page written by every transaction that added an audit row. Audit rows are never
--   deleted, so a plain rowid (max(id) + 1) is just as monotonic. Every row keeps its id.
-- - audit_by_principal_at and audit_by_key serve only autonomous_spend (sqlite.sql), which
--   reads only the rows that count against the daily autonomous limit: they index those rows
--   alone (partial indexes; their WHERE is that query's, so the planner uses them). A read's
--   audit row, most rows, no longer touches them.
-- - ledger_by_run: no statement reads the ledger by run (only by key); dropped.

ALTER TABLE audit RENAME TO audit_0005;

CREATE TABLE audit (
    id              INTEGER PRIMARY KEY,  -- 0006: without AUTOINCREMENT (rows are never deleted)
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    at              TEXT NOT NULL,
    principal       TEXT NOT NULL,
    capability      TEXT NOT NULL,
    kind            TEXT NOT NULL,
    tool_use_id     TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    tier            TEXT,
    amount_usd      TEXT,
    input           TEXT NOT NULL DEFAULT '{}',
    output          TEXT,
    idempotency_key TEXT,
    duration_ms     REAL
);

INSERT INTO audit (id, run_id, at, principal, capability, kind, tool_use_id, outcome, tier,
    amount_usd, input, output, idempotency_key, duration_ms)
SELECT id, run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd,
    input, output, idempotency_key, duration_ms
FROM audit_0005 ORDER BY id;

-- its indexes and its sqlite_sequence row go with it
DROP TABLE audit_0005;

CREATE INDEX audit_by_run ON audit (run_id, id);

CREATE INDEX audit_by_principal_at ON audit (principal, at)
    WHERE tier = 'auto' AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL;

CREATE INDEX audit_by_key ON audit (idempotency_key)
    WHERE tier = 'auto' AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL;

DROP INDEX ledger_by_run;
