-- Migration 0005: dual control — the votes of several approvers on one pending approval.
--
-- A vote counts for the arguments whose digest it names (an approver's edit starts a new set).
-- One person counts once: the primary key refuses a second vote of theirs for the same
-- arguments. The approval itself is decided by decide_approval's conditional update.

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
