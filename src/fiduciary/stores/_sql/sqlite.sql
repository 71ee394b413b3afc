-- The SQLite dialect's statements (named queries: see queries.py).
--
-- Queries the shared core runs take named parameters (:name); those of the SQLite writer
-- (sqlite_writer.py) take positional ones (?), bound from row tuples it encoded once.
-- Ids are UUID text, times ISO-8601 UTC text (ordered as text = ordered in time), money
-- decimal TEXT, structured values JSON text (sql/schema.sql).

-- name: select_runs
SELECT run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner,
    lease_until, title, scopes
FROM runs

-- name: select_approvals
SELECT approval_id, run_id, tool_use_id, principal, capability, args, args_digest, tier,
    amount_usd, modifiable_fields, executor, status, created_at, expires_at, decided_by,
    decided_at, reason, approved_args, approved_digest, client_result
FROM approvals

-- name: read_events
-- a limit of -1 is none
SELECT payload FROM events WHERE run_id = :run_id AND seq > :after_seq ORDER BY seq LIMIT :limit

-- name: read_global
-- The global order (GlobalEvents.read_global): events after a position, with their run's
-- principal and status (the core filters them). held: always 0 (numbers are given in commit
-- order: nothing can commit behind a number read). gseq is the rowid (0005); CROSS JOIN keeps
-- events the outer loop.
SELECT e.gseq, e.type, e.payload, r.principal, r.status, 0 AS held
FROM events AS e CROSS JOIN runs AS r ON r.run_id = e.run_id
WHERE e.gseq > :after
ORDER BY e.gseq LIMIT :limit

-- name: get_ledger
SELECT key, run_id, tool_use_id, capability, status, started_at, finished_at, result, error
FROM ledger WHERE key = :key

-- name: audit_records
SELECT run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd, input,
    output, idempotency_key, duration_ms
FROM audit WHERE run_id = :run_id ORDER BY id

-- name: select_audit
-- Audit rows for Audit.find_audit: the core adds the WHERE of its filters and the order.
SELECT run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd, input,
    output, idempotency_key, duration_ms
FROM audit

-- name: select_ledger
-- Ledger rows with their run's principal, for Ledger.find_ledger (the core adds the rest).
SELECT l.key, l.run_id, l.tool_use_id, l.capability, l.status, l.started_at, l.finished_at,
    l.result, l.error, r.principal
FROM ledger AS l JOIN runs AS r ON r.run_id = l.run_id

-- name: autonomous_spend
-- The amounts of a principal's autonomous spend since a time: audit rows that count, then
-- reservations whose call has no such row yet. Summed as Decimal in Python (TEXT in SQL).
-- audit_by_principal_at and audit_by_key index only the rows this reads: their WHERE is this
-- one's (migrations/0006_audit_and_ledger_pages.sql); change both together.
SELECT amount_usd FROM audit
WHERE principal = :principal AND at >= :since AND tier = 'auto'
    AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL
UNION ALL
SELECT r.amount_usd FROM spend_reservations AS r
WHERE r.principal = :principal AND r.at >= :since AND NOT EXISTS (
    SELECT 1 FROM audit AS a
    WHERE a.idempotency_key = r.key AND a.principal = r.principal AND a.tier = 'auto'
        AND a.outcome IN ('ok', 'unknown') AND a.amount_usd IS NOT NULL)

-- name: runs_to_resume
-- Runs that can make progress and that nobody leases: running (new, or left by a dead
-- process) or suspended with a decision not taken up yet (the wake marker), through the
-- runs_runnable index. With runs_expired: two statements, each on its index (one UNION would
-- sort in a temporary b-tree); SQLiteStore.runs_to_resume merges them.
SELECT run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner,
    lease_until, title, scopes
FROM runs INDEXED BY runs_runnable
WHERE (status = 'running' OR wake_at IS NOT NULL)
    AND status IN ('running', 'awaiting_approval', 'awaiting_client_result',
        'awaiting_input')
    AND (lease_until IS NULL OR lease_until <= :now)
ORDER BY created_at, run_id LIMIT :limit

-- name: runs_expired
-- Suspended runs with an expired approval (approvals_by_status), nobody leasing them.
SELECT r.run_id, r.principal, r.status, r.created_at, r.updated_at, r.last_seq, r.epoch,
    r.lease_owner, r.lease_until, r.title, r.scopes
FROM runs r
WHERE r.run_id IN (
        SELECT run_id FROM approvals WHERE status = 'pending' AND expires_at <= :now)
    AND r.status IN ('awaiting_approval', 'awaiting_client_result', 'awaiting_input')
    AND (r.lease_until IS NULL OR r.lease_until <= :now)
LIMIT :limit

-- name: acquire
-- then the run is read back in the same transaction (no RETURNING: SQLite before 3.35)
UPDATE runs SET lease_owner = :owner, lease_until = :until, epoch = epoch + 1
WHERE run_id = :run_id AND (lease_owner IS NULL OR lease_until IS NULL
    OR lease_until <= :now OR lease_owner = :owner)

-- name: renew
UPDATE runs SET lease_until = :until
WHERE run_id = :run_id AND epoch = :epoch AND lease_owner IS NOT NULL

-- name: release
UPDATE runs SET lease_owner = NULL, lease_until = NULL WHERE run_id = :run_id AND epoch = :epoch

-- name: decide_approval
-- A decision replaces the whole record (as the memory store does), if the status is as expected.
UPDATE approvals SET run_id = :run_id, tool_use_id = :tool_use_id, principal = :principal,
    capability = :capability, args = :args, args_digest = :args_digest, tier = :tier,
    amount_usd = :amount_usd, modifiable_fields = :modifiable_fields, executor = :executor,
    status = :status, created_at = :created_at, expires_at = :expires_at,
    decided_by = :decided_by, decided_at = :decided_at, reason = :reason,
    approved_args = :approved_args, approved_digest = :approved_digest,
    client_result = :client_result
WHERE approval_id = :approval_id AND status = :expected_status

-- name: add_vote
-- A vote lands only on a pending approval, once per approver and arguments (the primary key).
INSERT OR IGNORE INTO approval_votes (approval_id, approver, args_digest, approved_args, tier,
    amount_usd, at)
SELECT :approval_id, :approver, :args_digest, :approved_args, :tier, :amount_usd, :at
WHERE EXISTS (SELECT 1 FROM approvals WHERE approval_id = :approval_id AND status = 'pending')

-- name: select_votes
SELECT approval_id, approver, args_digest, approved_args, tier, amount_usd, at
FROM approval_votes WHERE approval_id = :approval_id ORDER BY at, approver, args_digest

-- name: ledger_finish
UPDATE ledger SET status = :status, finished_at = :finished_at, result = :result, error = :error
WHERE key = :key

-- name: ledger_retry
UPDATE ledger SET status = 'started', started_at = :started_at, finished_at = NULL,
    result = NULL, error = NULL
WHERE key = :key AND status = 'failed'

-- name: release_autonomous
DELETE FROM spend_reservations WHERE key = :key

-- name: insert_run
INSERT INTO runs (run_id, principal, status, created_at, updated_at, last_seq, epoch,
    lease_owner, lease_until, title, scopes)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: insert_event
-- gseq, the global order, is the rowid: the next number (max + 1), under the write lock
-- (migrations/0005_events_in_commit_order.sql)
INSERT INTO events (run_id, seq, type, at, payload) VALUES (?, ?, ?, ?, ?)

-- name: insert_approval
INSERT INTO approvals (approval_id, run_id, tool_use_id, principal, capability, args,
    args_digest, tier, amount_usd, modifiable_fields, executor, status, created_at, expires_at,
    decided_by, decided_at, reason, approved_args, approved_digest, client_result)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: insert_audit
INSERT INTO audit (run_id, at, principal, capability, kind, tool_use_id, outcome, tier,
    amount_usd, input, output, idempotency_key, duration_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: advance_run
-- A commit's guarded update (last_seq, updated_at, run_id, epoch, the last_seq it follows).
-- Without a status change, status is not assigned: its index (runs_by_status) stays untouched.
UPDATE runs SET last_seq = ?, updated_at = ? WHERE run_id = ? AND epoch = ? AND last_seq = ?

-- name: advance_run_with_status
-- A status other than suspended (running again, or ended) clears the wake marker: the drive
-- that took the decision up is past it (migrations/0003_wake_marker.sql).
UPDATE runs SET last_seq = ?1, updated_at = ?2, status = ?3,
    wake_at = CASE WHEN ?3 IN ('awaiting_approval', 'awaiting_client_result',
        'awaiting_input') THEN wake_at END
WHERE run_id = ?4 AND epoch = ?5 AND last_seq = ?6

-- name: set_status
UPDATE runs SET status = ?3,
    wake_at = CASE WHEN ?3 IN ('awaiting_approval', 'awaiting_client_result',
        'awaiting_input') THEN wake_at END
WHERE run_id = ?1 AND epoch = ?2

-- name: check_epoch
SELECT 1 FROM runs WHERE run_id = ? AND epoch = ?

-- name: run_state
SELECT epoch, last_seq FROM runs WHERE run_id = ?

-- name: run_epoch
SELECT epoch FROM runs WHERE run_id = ?

-- name: run_exists
SELECT 1 FROM runs WHERE run_id = ?

-- name: insert_ledger
INSERT INTO ledger (key, run_id, tool_use_id, capability, status, started_at, finished_at,
    result, error)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO NOTHING

-- name: has_reservation
SELECT 1 FROM spend_reservations WHERE key = ?

-- name: insert_reservation
INSERT INTO spend_reservations (key, principal, amount_usd, at) VALUES (?, ?, ?, ?)
