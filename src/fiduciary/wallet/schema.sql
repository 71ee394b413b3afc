-- The paper wallet's tables. They live beside the run store's tables (same file by default);
-- every name starts with wallet_. Amounts are exact: `units` is the integer count of the
-- asset's smallest unit (summed by SQLite exactly), `amount` the same value as Decimal text.

CREATE TABLE IF NOT EXISTS wallet_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One row per transaction. The idempotency key of the call that made it is unique, so a
-- replayed call finds its transaction instead of posting again. `digest` chains each
-- transaction to the previous one (like a block's hash), so an edit anywhere shows.
CREATE TABLE IF NOT EXISTS wallet_transactions (
    tx_id INTEGER PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    prev_digest TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    request_digest TEXT NOT NULL,
    kind TEXT NOT NULL,
    principal TEXT,            -- NULL for system transactions (genesis, market rebalancing)
    label TEXT NOT NULL,
    at TEXT NOT NULL,          -- ISO-8601 UTC with microseconds
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS wallet_transactions_by_principal
    ON wallet_transactions (principal, tx_id);

-- Double entry: the legs of a transaction sum to zero per asset. Each leg carries the
-- idempotency key of the call that made it, unique with the leg number.
CREATE TABLE IF NOT EXISTS wallet_postings (
    tx_id INTEGER NOT NULL REFERENCES wallet_transactions (tx_id),
    leg INTEGER NOT NULL,
    idempotency_key TEXT NOT NULL,
    owner TEXT NOT NULL,       -- a principal, or @name for a system account
    book TEXT NOT NULL,        -- available, savings, debt, rewards, reserve, ...
    asset TEXT NOT NULL,
    units INTEGER NOT NULL,
    amount TEXT NOT NULL,
    memo TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tx_id, leg),
    UNIQUE (idempotency_key, leg)
);
CREATE INDEX IF NOT EXISTS wallet_postings_by_account ON wallet_postings (owner, book, asset);

-- The ledger is append-only: a posted transaction is corrected by another, never edited.
CREATE TRIGGER IF NOT EXISTS wallet_transactions_no_update BEFORE UPDATE ON wallet_transactions
BEGIN SELECT RAISE(ABORT, 'the wallet ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS wallet_transactions_no_delete BEFORE DELETE ON wallet_transactions
BEGIN SELECT RAISE(ABORT, 'the wallet ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS wallet_postings_no_update BEFORE UPDATE ON wallet_postings
BEGIN SELECT RAISE(ABORT, 'the wallet ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS wallet_postings_no_delete BEFORE DELETE ON wallet_postings
BEGIN SELECT RAISE(ABORT, 'the wallet ledger is append-only'); END;

-- Interest and rewards accrue continuously; they are posted when the principal next writes.
-- `through` is the time up to which an accrual is posted.
CREATE TABLE IF NOT EXISTS wallet_accruals (
    owner TEXT NOT NULL,
    asset TEXT NOT NULL,
    kind TEXT NOT NULL,        -- supply | borrow
    through TEXT NOT NULL,
    PRIMARY KEY (owner, asset, kind)
);

CREATE TABLE IF NOT EXISTS wallet_principals (
    principal TEXT PRIMARY KEY,
    address TEXT NOT NULL UNIQUE,
    opened_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS wallet_contacts (
    principal TEXT NOT NULL,
    name_key TEXT NOT NULL,    -- the name, case-folded: one contact per name
    name TEXT NOT NULL,
    address TEXT NOT NULL,
    saved_at TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    PRIMARY KEY (principal, name_key)
);

CREATE TABLE IF NOT EXISTS wallet_quotes (
    quote_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    asset_in TEXT NOT NULL,
    asset_out TEXT NOT NULL,
    amount_in TEXT NOT NULL,
    amount_out TEXT NOT NULL,
    body TEXT NOT NULL,        -- the whole quote as JSON
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);

-- Payment links and invoices: payments the principal expects to receive. `reference` is what a
-- payer quotes; `idempotency_key` is the call that created it (a replay finds it). A row moves
-- open → paid (with the transaction that paid it) or open → cancelled, never back.
CREATE TABLE IF NOT EXISTS wallet_receivables (
    reference TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    kind TEXT NOT NULL,        -- link | invoice
    asset TEXT NOT NULL,
    amount TEXT NOT NULL,
    memo TEXT NOT NULL,
    due TEXT,                  -- ISO-8601 UTC, or NULL
    items TEXT NOT NULL,       -- JSON: the invoice's line items ([] for a link)
    status TEXT NOT NULL,      -- open | paid | cancelled
    created_at TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    paid_digest TEXT,
    paid_by TEXT,
    closed_at TEXT
);
CREATE INDEX IF NOT EXISTS wallet_receivables_by_principal
    ON wallet_receivables (principal, kind, created_at);
