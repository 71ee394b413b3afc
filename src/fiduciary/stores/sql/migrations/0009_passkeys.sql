-- Migration 0009: passkeys in the run store — the registered credentials, the signatures made
-- with them and the registration challenges handed out, so that several servers on one
-- database share them (fiduciary.passkeys' PasskeyRegistry reads and writes these tables).
--
-- A signature keeps the assertion's exact bytes and the binding that was signed, for `audit
-- verify`; (credential, challenge) is stored once: a replayed assertion is refused. A
-- registration challenge is one per principal (the latest options), taken once.
-- IF NOT EXISTS: a registry opened on the file before the store migrated it made them already.

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
