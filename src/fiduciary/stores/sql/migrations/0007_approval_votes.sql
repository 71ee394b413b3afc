-- Migration 0007: dual control — the votes of several approvers on one pending approval.
--
-- A vote counts for the arguments whose digest it names (an approver's edit starts a new set).
-- One person counts once: the primary key refuses a second vote of theirs for the same
-- arguments. The approval itself is decided by decide_approval's conditional update.

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
