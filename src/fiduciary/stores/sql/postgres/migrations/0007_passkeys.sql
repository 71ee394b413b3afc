-- Migration 0007: passkeys in the run store — the registered credentials, the signatures made
-- with them and the registration challenges handed out, so that several servers on one
-- database share them (fiduciary.passkeys' PasskeyRegistry reads and writes these tables).
--
-- A signature keeps the assertion's exact bytes and the binding that was signed, for `audit
-- verify`; (credential, challenge) is stored once: a replayed assertion is refused on every
-- server. A registration challenge is one per principal (the latest options), taken once.

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
