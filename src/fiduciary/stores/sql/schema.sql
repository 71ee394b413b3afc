-- The current full schema of fiduciary's SQLite store.
--
-- This file is documentation and a test oracle: a database built from it is identical to one
-- built by applying migrations/NNNN_name.sql in order (tests/unit/stores/test_sqlite.py checks
-- it). The store never executes it; it applies the migrations. Change the schema by adding a
-- migration AND updating this file.
--
-- Conventions:
-- - ids (run_id, approval_id) are canonical UUID text (lowercase, hyphenated);
-- - times are ISO-8601 UTC text with microseconds, '2026-01-01T12:00:00.000000+00:00', so
--   comparing and ordering them as text is comparing and ordering the instants;
-- - money (amount_usd) is decimal TEXT, parsed back with Decimal(): never REAL;
-- - structured values (args, scopes, payload ...) are JSON text.

CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL
);

CREATE TABLE runs (
    run_id      TEXT PRIMARY KEY,
    principal   TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    last_seq    INTEGER NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    epoch       INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until TEXT,
    title       TEXT NOT NULL DEFAULT '',
    scopes      TEXT NOT NULL DEFAULT '[]',
    wake_at     TEXT  -- 0003: a decision not taken up yet (see migrations/0003_wake_marker.sql)
);

CREATE INDEX runs_by_created ON runs (created_at, run_id);

CREATE INDEX runs_by_principal ON runs (principal, created_at, run_id);

CREATE INDEX runs_by_status ON runs (status, created_at, run_id);

CREATE INDEX runs_runnable ON runs (created_at, run_id)
    WHERE status = 'running' OR wake_at IS NOT NULL;

-- In commit order (0005): the rowid is gseq, the global order; (run_id, seq) is unique.
CREATE TABLE events (
    run_id  TEXT NOT NULL REFERENCES runs (run_id),
    seq     INTEGER NOT NULL CHECK (seq >= 1),
    type    TEXT NOT NULL,
    at      TEXT NOT NULL,
    payload TEXT NOT NULL,
    gseq    INTEGER PRIMARY KEY  -- the global order (0004), the rowid since 0005
);

CREATE UNIQUE INDEX events_by_run ON events (run_id, seq);

CREATE TABLE approvals (
    approval_id       TEXT PRIMARY KEY,
    run_id            TEXT NOT NULL REFERENCES runs (run_id),
    tool_use_id       TEXT NOT NULL,
    principal         TEXT NOT NULL,
    capability        TEXT NOT NULL,
    args              TEXT NOT NULL,
    args_digest       TEXT NOT NULL,
    tier              TEXT NOT NULL,
    amount_usd        TEXT,
    modifiable_fields TEXT NOT NULL DEFAULT '[]',
    executor          TEXT NOT NULL,
    status            TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    expires_at        TEXT NOT NULL,
    decided_by        TEXT,
    decided_at        TEXT,
    reason            TEXT,
    approved_args     TEXT,
    approved_digest   TEXT,
    client_result     TEXT
);

CREATE INDEX approvals_by_principal ON approvals (principal, status, created_at, approval_id);

CREATE INDEX approvals_by_run ON approvals (run_id, created_at, approval_id);

CREATE INDEX approvals_by_status ON approvals (status, created_at, approval_id);

-- The votes of dual control (see the migration that made it).
CREATE TABLE approval_votes (
    approval_id   TEXT NOT NULL REFERENCES approvals (approval_id),
    approver      TEXT NOT NULL,
    args_digest   TEXT NOT NULL,
    approved_args TEXT NOT NULL,
    tier          TEXT NOT NULL,
    amount_usd    TEXT,
    at            TEXT NOT NULL,
    PRIMARY KEY (approval_id, approver, args_digest)
);

CREATE TABLE ledger (
    key         TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    capability  TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    result      TEXT,
    error       TEXT
);

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

CREATE INDEX audit_by_run ON audit (run_id, id);

-- Only the rows autonomous_spend reads (0006): those that count against the daily limit.
CREATE INDEX audit_by_principal_at ON audit (principal, at)
    WHERE tier = 'auto' AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL;

-- Reservations of the daily autonomous spend (migration 0002; Store.reserve_autonomous): one
-- per auto write, counted until the write's audit row (same idempotency_key) counts instead.
CREATE TABLE spend_reservations (
    key        TEXT PRIMARY KEY,
    principal  TEXT NOT NULL,
    amount_usd TEXT NOT NULL,
    at         TEXT NOT NULL
);

CREATE INDEX spend_reservations_by_principal_at ON spend_reservations (principal, at);

CREATE INDEX audit_by_key ON audit (idempotency_key)
    WHERE tier = 'auto' AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL;

-- A decision on a pending approval (or a person's answer to a question), made by any
-- process, marks its run for resuming (0003, 0008).
CREATE TRIGGER approvals_wake_run AFTER UPDATE OF status ON approvals
    FOR EACH ROW WHEN OLD.status = 'pending' AND NEW.status <> 'pending'
BEGIN
    UPDATE runs SET wake_at = COALESCE(wake_at, NEW.decided_at, NEW.created_at)
    WHERE run_id = NEW.run_id
      AND status IN ('running', 'awaiting_approval', 'awaiting_client_result',
          'awaiting_input');
END;

-- Passkeys (see the migration that made them): credentials, signatures, challenges.
CREATE TABLE IF NOT EXISTS passkey_credentials (
    credential_id BLOB PRIMARY KEY,
    principal     TEXT NOT NULL,
    name          TEXT NOT NULL,
    public_key    BLOB NOT NULL,
    sign_count    INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    last_used_at  TEXT,
    revoked_at    TEXT
);

CREATE TABLE IF NOT EXISTS passkey_signatures (
    id                 INTEGER PRIMARY KEY,
    run_id             TEXT NOT NULL,
    approval_id        TEXT NOT NULL,
    approver           TEXT NOT NULL,
    credential_id      BLOB NOT NULL REFERENCES passkey_credentials (credential_id),
    binding            TEXT NOT NULL,
    challenge          BLOB NOT NULL,
    authenticator_data BLOB NOT NULL,
    client_data_json   BLOB NOT NULL,
    signature          BLOB NOT NULL,
    rp_id              TEXT NOT NULL,
    origins            TEXT NOT NULL,
    at                 TEXT NOT NULL,
    UNIQUE (credential_id, challenge)
);

CREATE INDEX IF NOT EXISTS passkey_signatures_by_run ON passkey_signatures (run_id, id);

CREATE TABLE IF NOT EXISTS passkey_challenges (
    principal  TEXT PRIMARY KEY,
    challenge  BLOB NOT NULL,
    expires_at TEXT NOT NULL
);
