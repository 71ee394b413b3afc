-- The current full schema of fiduciary's PostgreSQL store.
--
-- This file is documentation and a test oracle: a database built from it is identical to one
-- built by applying migrations/NNNN_name.sql in order (tests/unit/stores/test_postgres.py
-- compares their catalogs). The store never executes it; it applies the migrations. Change the
-- schema by adding a migration AND updating this file.
--
-- The tables are those of the SQLite store (../schema.sql), in PostgreSQL's own types:
-- - ids are uuid, times timestamptz (UTC on every connection of the store), money numeric
--   (never a float), lists of names text[];
-- - structured values are json (not jsonb): kept byte for byte as written, as the SQLite store
--   keeps its JSON text, and able to hold "\u0000", which jsonb refuses;
-- - runs.wake_at (PostgreSQL only): a decision arrived for a suspended run and no worker has
--   claimed the run since (see the triggers at the end and PostgresStore.claim_runnable).
-- runs has fillfactor 70: most updates of a run (last_seq, updated_at, its lease) change no
-- indexed column, so they can stay on the same page (HOT updates) without touching an index.

CREATE TABLE schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL
);

CREATE TABLE runs (
    run_id      uuid PRIMARY KEY,
    principal   text NOT NULL,
    status      text NOT NULL CHECK (status IN ('running', 'awaiting_approval',
                    'awaiting_client_result', 'completed', 'failed', 'cancelled',
                    'awaiting_input', 'awaiting_child')),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    last_seq    bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    epoch       bigint NOT NULL DEFAULT 0,
    lease_owner text,
    lease_until timestamptz,
    title       text NOT NULL DEFAULT '',
    scopes      text[] NOT NULL DEFAULT '{}',
    wake_at     timestamptz
) WITH (fillfactor = 70);

CREATE INDEX runs_by_created ON runs (created_at, run_id);

CREATE INDEX runs_by_principal ON runs (principal, created_at, run_id);

CREATE INDEX runs_by_status ON runs (status, created_at, run_id);

CREATE INDEX runs_runnable ON runs (created_at, run_id)
    WHERE status = 'running' OR wake_at IS NOT NULL;

CREATE TABLE events (
    run_id  uuid NOT NULL REFERENCES runs (run_id),
    seq     bigint NOT NULL CHECK (seq >= 1),
    type    text NOT NULL,
    at      timestamptz NOT NULL,
    payload json NOT NULL,
    -- 0004: the global order is (xid, gseq); see migrations/0004_global_order.sql
    xid     xid8 NOT NULL DEFAULT pg_current_xact_id(),
    gseq    bigint NOT NULL GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (run_id, seq)
);

CREATE UNIQUE INDEX events_by_gseq ON events (gseq);

CREATE INDEX events_global ON events (xid, gseq);

CREATE TABLE approvals (
    approval_id       uuid PRIMARY KEY,
    run_id            uuid NOT NULL REFERENCES runs (run_id),
    tool_use_id       text NOT NULL,
    principal         text NOT NULL,
    capability        text NOT NULL,
    args              json NOT NULL,
    args_digest       text NOT NULL,
    tier              text NOT NULL CHECK (tier IN ('confirm', 'explicit')),
    amount_usd        numeric,
    modifiable_fields text[] NOT NULL DEFAULT '{}',
    executor          text NOT NULL CHECK (executor IN ('server', 'client', 'person')),
    status            text NOT NULL CHECK (status IN ('pending', 'approved', 'denied',
                          'expired', 'client_result', 'superseded')),
    created_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    decided_by        text,
    decided_at        timestamptz,
    reason            text,
    approved_args     json,
    approved_digest   text,
    client_result     json
);

CREATE INDEX approvals_by_principal ON approvals (principal, status, created_at, approval_id);

CREATE INDEX approvals_by_run ON approvals (run_id, created_at, approval_id);

CREATE INDEX approvals_by_status ON approvals (status, created_at, approval_id);

CREATE INDEX approvals_pending_expiry ON approvals (expires_at) WHERE status = 'pending';

-- The votes of dual control (see the migration that made it).
CREATE TABLE approval_votes (
    approval_id   uuid NOT NULL REFERENCES approvals (approval_id),
    approver      text NOT NULL,
    args_digest   text NOT NULL,
    approved_args json NOT NULL,
    tier          text NOT NULL CHECK (tier IN ('confirm', 'explicit')),
    amount_usd    numeric,
    at            timestamptz NOT NULL,
    PRIMARY KEY (approval_id, approver, args_digest)
);

CREATE TABLE ledger (
    key         text PRIMARY KEY,
    run_id      uuid NOT NULL,
    tool_use_id text NOT NULL,
    capability  text NOT NULL,
    status      text NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    result      json,
    error       text
);

CREATE INDEX ledger_by_run ON ledger (run_id);

CREATE TABLE audit (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          uuid NOT NULL REFERENCES runs (run_id),
    at              timestamptz NOT NULL,
    principal       text NOT NULL,
    capability      text NOT NULL,
    kind            text NOT NULL,
    tool_use_id     text NOT NULL,
    outcome         text NOT NULL,
    tier            text,
    amount_usd      numeric,
    input           json NOT NULL DEFAULT '{}',
    output          text,
    idempotency_key text,
    duration_ms     double precision
);

CREATE INDEX audit_by_run ON audit (run_id, id);

CREATE INDEX audit_by_principal_at ON audit (principal, at);

-- A decision on a pending approval (by a person on any instance, or its expiry) asks for the
-- run to be continued: wake_at marks it for the workers' claim.
CREATE FUNCTION fiduciary_wake_on_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET wake_at = COALESCE(wake_at, now())
    WHERE run_id = NEW.run_id
      AND status IN ('running', 'awaiting_approval', 'awaiting_client_result',
          'awaiting_input');
    RETURN NULL;
END
$$;

CREATE TRIGGER approvals_wake_run AFTER UPDATE OF status ON approvals
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status <> 'pending')
    EXECUTE FUNCTION fiduciary_wake_on_decision();

-- A run that can be driven and that nobody leases wakes the workers (LISTEN
-- fiduciary_runnable). Delivered at commit; identical notifications of one transaction fold.
CREATE FUNCTION fiduciary_notify_runnable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('fiduciary_runnable', NEW.run_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_notify_runnable AFTER INSERT OR UPDATE ON runs
    FOR EACH ROW WHEN (NEW.lease_owner IS NULL AND (NEW.status = 'running'
        OR (NEW.wake_at IS NOT NULL
            AND NEW.status IN ('awaiting_approval', 'awaiting_client_result',
                'awaiting_input'))))
    EXECUTE FUNCTION fiduciary_notify_runnable();

-- Requests to cancel a run that another process drives (migration 0002; NOTIFY
-- fiduciary_cancel carries the request_id only).
CREATE TABLE cancel_requests (
    request_id   uuid PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (run_id),
    by_principal text NOT NULL,
    scopes       text[] NOT NULL DEFAULT '{}',
    reason       text NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL
);

CREATE INDEX cancel_requests_by_time ON cancel_requests (requested_at);

-- Reservations of the daily autonomous spend (migration 0003; Store.reserve_autonomous): one
-- per auto write, counted until the write's audit row (same idempotency_key) counts instead.
CREATE TABLE spend_reservations (
    key        text PRIMARY KEY,
    principal  text NOT NULL,
    amount_usd numeric NOT NULL,
    at         timestamptz NOT NULL
);

CREATE INDEX spend_reservations_by_principal_at ON spend_reservations (principal, at);

CREATE INDEX audit_by_key ON audit (idempotency_key);

-- Passkeys (see the migration that made them): credentials, signatures, challenges.
CREATE TABLE passkey_credentials (
    credential_id bytea PRIMARY KEY,
    principal     text NOT NULL,
    name          text NOT NULL,
    public_key    bytea NOT NULL,
    sign_count    bigint NOT NULL,
    created_at    timestamptz NOT NULL,
    last_used_at  timestamptz,
    revoked_at    timestamptz
);

CREATE TABLE passkey_signatures (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id             uuid NOT NULL,
    approval_id        uuid NOT NULL,
    approver           text NOT NULL,
    credential_id      bytea NOT NULL REFERENCES passkey_credentials (credential_id),
    binding            text NOT NULL,
    challenge          bytea NOT NULL,
    authenticator_data bytea NOT NULL,
    client_data_json   bytea NOT NULL,
    signature          bytea NOT NULL,
    rp_id              text NOT NULL,
    origins            text NOT NULL,
    at                 timestamptz NOT NULL,
    UNIQUE (credential_id, challenge)
);

CREATE INDEX passkey_signatures_by_run ON passkey_signatures (run_id, id);

CREATE TABLE passkey_challenges (
    principal  text PRIMARY KEY,
    challenge  bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
