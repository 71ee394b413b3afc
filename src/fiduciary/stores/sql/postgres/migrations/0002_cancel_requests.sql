-- Migration 0002: cancel requests (PostgresStore.request_cancel).
--
-- A request to cancel a run that another process drives is a row here; NOTIFY
-- fiduciary_cancel carries only its id, and the process holding the run's lease reads the row.
-- Writing a row needs the application's privileges on this table (a bare NOTIFY from any role
-- that can connect names no row and is ignored). A request is honoured for two minutes after
-- it was last sent (requested_at, the database's clock, refreshed by each resend); rows older
-- than an hour are deleted by later requests.

CREATE TABLE cancel_requests (
    request_id   uuid PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (run_id),
    by_principal text NOT NULL,
    scopes       text[] NOT NULL DEFAULT '{}',
    reason       text NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL
);

CREATE INDEX cancel_requests_by_time ON cancel_requests (requested_at);
