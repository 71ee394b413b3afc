-- Migration 0003: reservations of the daily autonomous spend (Store.reserve_autonomous).
--
-- An auto write reserves its amount before it runs, checked against the limit in the same
-- transaction (under a transaction-level advisory lock per principal), so the limit holds for
-- any number of agents and processes on one database. A reservation counts until the write's
-- audit row counts instead (same idempotency_key), and is deleted only when the write failed
-- before any effect.

CREATE TABLE spend_reservations (
    key        text PRIMARY KEY,
    principal  text NOT NULL,
    amount_usd numeric NOT NULL,
    at         timestamptz NOT NULL
);

CREATE INDEX spend_reservations_by_principal_at ON spend_reservations (principal, at);

CREATE INDEX audit_by_key ON audit (idempotency_key);
