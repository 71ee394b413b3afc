-- The PostgreSQL dialect's statements (named queries: see queries.py).
--
-- Queries the shared core runs take named parameters (%(name)s); the group-commit writer's
-- take one array a column (%b, binary) and write a whole batch with one statement each.
-- Ids are uuid, times timestamptz, money numeric, structured values json (kept as written);
-- arrays (scopes, modifiable_fields) are sent as JSON text, as SQLite keeps them.

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
-- a NULL limit is none
SELECT payload FROM events WHERE run_id = %(run_id)s AND seq > %(after_seq)s ORDER BY seq
LIMIT %(limit)s

-- name: read_global
-- The global order (GlobalEvents.read_global; migrations/0004_global_order.sql): events after
-- a position in (xid, gseq) order, with their run's principal and status (the core filters
-- them). A position is a gseq: its row gives the xid to go on from
-- (an unknown one, the nearest below). held: the row's transaction is not older than every
-- one in progress, so an older one may still commit before it: not read yet (the core stops
-- there and the store looks again soon).
SELECT e.gseq, e.type, e.payload, r.principal, r.status,
    e.xid >= pg_snapshot_xmin(pg_current_snapshot()) AS held
FROM events AS e JOIN runs AS r ON r.run_id = e.run_id
WHERE (e.xid, e.gseq) > (
    COALESCE(
        (SELECT c.xid FROM events AS c WHERE c.gseq <= %(after)s ORDER BY c.gseq DESC LIMIT 1),
        '0'::xid8),
    %(after)s)
ORDER BY e.xid, e.gseq LIMIT %(limit)s

-- name: get_ledger
SELECT key, run_id, tool_use_id, capability, status, started_at, finished_at, result, error
FROM ledger WHERE key = %(key)s

-- name: audit_records
SELECT run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd, input,
    output, idempotency_key, duration_ms
FROM audit WHERE run_id = %(run_id)s ORDER BY id

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
-- reservations whose call has no such row yet.
SELECT amount_usd FROM audit
WHERE principal = %(principal)s AND at >= %(since)s AND tier = 'auto'
    AND outcome IN ('ok', 'unknown') AND amount_usd IS NOT NULL
UNION ALL
SELECT r.amount_usd FROM spend_reservations AS r
WHERE r.principal = %(principal)s AND r.at >= %(since)s AND NOT EXISTS (
    SELECT 1 FROM audit AS a
    WHERE a.idempotency_key = r.key AND a.principal = r.principal AND a.tier = 'auto'
        AND a.outcome IN ('ok', 'unknown') AND a.amount_usd IS NOT NULL)

-- name: runs_to_resume
-- Runs that can make progress: running (new, or left by a dead process), suspended with a
-- decision no drive has taken up yet (wake_at), suspended with an expired approval; and that
-- nobody leases.
SELECT r.run_id, r.principal, r.status, r.created_at, r.updated_at, r.last_seq, r.epoch,
    r.lease_owner, r.lease_until, r.title, r.scopes
FROM runs r WHERE r.run_id IN (
        SELECT run_id FROM runs
        WHERE (status = 'running' OR wake_at IS NOT NULL)
            AND (lease_until IS NULL OR lease_until <= %(now)s)
        UNION
        SELECT run_id FROM approvals WHERE status = 'pending' AND expires_at <= %(now)s)
    AND r.status IN ('running', 'awaiting_approval', 'awaiting_client_result',
        'awaiting_input')
    AND (r.lease_until IS NULL OR r.lease_until <= %(now)s)
ORDER BY r.created_at, r.run_id
LIMIT %(limit)s

-- name: acquire
UPDATE runs SET lease_owner = %(owner)s, lease_until = %(until)s, epoch = epoch + 1
WHERE run_id = %(run_id)s AND (lease_owner IS NULL OR lease_until IS NULL
    OR lease_until <= %(now)s OR lease_owner = %(owner)s)
RETURNING run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner,
    lease_until, title, scopes

-- name: renew
UPDATE runs SET lease_until = %(until)s
WHERE run_id = %(run_id)s AND epoch = %(epoch)s AND lease_owner IS NOT NULL

-- name: release
UPDATE runs SET lease_owner = NULL, lease_until = NULL
WHERE run_id = %(run_id)s AND epoch = %(epoch)s

-- name: decide_approval
-- A decision replaces the whole record (as the memory store does), if the status is as expected.
UPDATE approvals SET run_id = %(run_id)s, tool_use_id = %(tool_use_id)s,
    principal = %(principal)s, capability = %(capability)s, args = %(args)s::json,
    args_digest = %(args_digest)s, tier = %(tier)s, amount_usd = %(amount_usd)s,
    modifiable_fields = ARRAY(SELECT json_array_elements_text(%(modifiable_fields)s::json)),
    executor = %(executor)s, status = %(status)s, created_at = %(created_at)s,
    expires_at = %(expires_at)s, decided_by = %(decided_by)s, decided_at = %(decided_at)s,
    reason = %(reason)s, approved_args = %(approved_args)s::json,
    approved_digest = %(approved_digest)s, client_result = %(client_result)s::json
WHERE approval_id = %(approval_id)s AND status = %(expected_status)s

-- name: add_vote
-- A vote lands only on a pending approval, once per approver and arguments (the primary key).
INSERT INTO approval_votes (approval_id, approver, args_digest, approved_args, tier, amount_usd,
    at)
SELECT %(approval_id)s, %(approver)s, %(args_digest)s, %(approved_args)s::json, %(tier)s,
    %(amount_usd)s, %(at)s
WHERE EXISTS (SELECT 1 FROM approvals WHERE approval_id = %(approval_id)s AND status = 'pending')
ON CONFLICT DO NOTHING

-- name: select_votes
SELECT approval_id, approver, args_digest, approved_args, tier, amount_usd, at
FROM approval_votes WHERE approval_id = %(approval_id)s ORDER BY at, approver, args_digest

-- name: ledger_finish
UPDATE ledger SET status = %(status)s, finished_at = %(finished_at)s, result = %(result)s::json,
    error = %(error)s
WHERE key = %(key)s

-- name: ledger_retry
UPDATE ledger SET status = 'started', started_at = %(started_at)s, finished_at = NULL,
    result = NULL, error = NULL
WHERE key = %(key)s AND status = 'failed'

-- name: release_autonomous
DELETE FROM spend_reservations WHERE key = %(key)s

-- name: lock_runs
-- The runs rows of a batch, in run_id order so that concurrent batches never deadlock.
SELECT run_id, epoch, last_seq FROM runs WHERE run_id = ANY(%b::uuid[])
ORDER BY run_id FOR NO KEY UPDATE

-- name: approvals_taken
SELECT approval_id FROM approvals WHERE approval_id = ANY(%b::uuid[])

-- name: insert_runs
INSERT INTO runs (run_id, principal, status, created_at, updated_at, last_seq, epoch,
    lease_owner, lease_until, title, scopes)
SELECT run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner,
    lease_until, title, ARRAY(SELECT json_array_elements_text(scopes::json))
FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::timestamptz[], %b::timestamptz[],
    %b::bigint[], %b::bigint[], %b::text[], %b::timestamptz[], %b::text[], %b::text[])
    AS r(run_id, principal, status, created_at, updated_at, last_seq, epoch, lease_owner,
        lease_until, title, scopes)

-- name: insert_events
INSERT INTO events (run_id, seq, type, at, payload)
SELECT run_id, seq, type, at, payload::json
FROM unnest(%b::uuid[], %b::bigint[], %b::text[], %b::timestamptz[], %b::text[])
    AS e(run_id, seq, type, at, payload)

-- name: insert_approvals
INSERT INTO approvals (approval_id, run_id, tool_use_id, principal, capability, args,
    args_digest, tier, amount_usd, modifiable_fields, executor, status, created_at, expires_at,
    decided_by, decided_at, reason, approved_args, approved_digest, client_result)
SELECT approval_id, run_id, tool_use_id, principal, capability, args::json, args_digest, tier,
    amount_usd, ARRAY(SELECT json_array_elements_text(modifiable_fields::json)), executor,
    status, created_at, expires_at, decided_by, decided_at, reason, approved_args::json,
    approved_digest, client_result::json
FROM unnest(%b::uuid[], %b::uuid[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
    %b::text[], %b::numeric[], %b::text[], %b::text[], %b::text[], %b::timestamptz[],
    %b::timestamptz[], %b::text[], %b::timestamptz[], %b::text[], %b::text[], %b::text[],
    %b::text[])
    AS a(approval_id, run_id, tool_use_id, principal, capability, args, args_digest, tier,
        amount_usd, modifiable_fields, executor, status, created_at, expires_at, decided_by,
        decided_at, reason, approved_args, approved_digest, client_result)

-- name: insert_audit
INSERT INTO audit (run_id, at, principal, capability, kind, tool_use_id, outcome, tier,
    amount_usd, input, output, idempotency_key, duration_ms)
SELECT run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd,
    input::json, output, idempotency_key, duration_ms
FROM unnest(%b::uuid[], %b::timestamptz[], %b::text[], %b::text[], %b::text[], %b::text[],
    %b::text[], %b::text[], %b::numeric[], %b::text[], %b::text[], %b::text[], %b::float8[])
    WITH ORDINALITY
    AS a(run_id, at, principal, capability, kind, tool_use_id, outcome, tier, amount_usd,
        input, output, idempotency_key, duration_ms, ord)
ORDER BY ord

-- name: update_runs
-- A status other than suspended (running again, or ended) clears the wake marker: the drive
-- that took the decision up is past it. The claim leaves the marker, so a drive that dies
-- before this commit leaves the run claimable once its lease lapses.
UPDATE runs SET last_seq = v.last_seq, status = COALESCE(v.status, runs.status),
    updated_at = COALESCE(v.updated_at, runs.updated_at),
    wake_at = CASE WHEN v.status IS NULL
        OR v.status IN ('awaiting_approval', 'awaiting_client_result', 'awaiting_input')
        THEN runs.wake_at END
FROM unnest(%b::uuid[], %b::bigint[], %b::text[], %b::timestamptz[])
    AS v(run_id, last_seq, status, updated_at)
WHERE runs.run_id = v.run_id

-- name: notify_events
SELECT pg_notify('fiduciary_events', p) FROM unnest(%b::text[]) AS p

-- name: claim
-- Lease up to a limit of runs that can be driven now and that nobody leases (the runnable
-- runs of runs_to_resume), skipping rows other workers are claiming; a new epoch each.
WITH candidates AS (
    SELECT run_id FROM runs
    WHERE (status = 'running' OR wake_at IS NOT NULL)
        AND (lease_until IS NULL OR lease_until <= %(now)s)
    UNION
    SELECT run_id FROM approvals WHERE status = 'pending' AND expires_at <= %(now)s
), picked AS (
    SELECT r.run_id FROM runs r JOIN candidates c ON c.run_id = r.run_id
    WHERE r.status IN ('running', 'awaiting_approval', 'awaiting_client_result',
        'awaiting_input')
        AND (r.lease_until IS NULL OR r.lease_until <= %(now)s)
        AND NOT r.run_id = ANY(%(exclude)s::uuid[])
    ORDER BY r.created_at, r.run_id
    LIMIT %(limit)s
    FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE runs SET lease_owner = %(owner)s, lease_until = %(until)s, epoch = runs.epoch + 1
FROM picked WHERE runs.run_id = picked.run_id
RETURNING runs.run_id, runs.principal, runs.status, runs.created_at, runs.updated_at,
    runs.last_seq, runs.epoch, runs.lease_owner, runs.lease_until, runs.title, runs.scopes

-- name: mark_runnable
UPDATE runs SET wake_at = COALESCE(wake_at, now()) WHERE run_id = %s
    AND status IN ('running', 'awaiting_approval', 'awaiting_client_result',
        'awaiting_input')

-- name: ledger_begin
-- Fenced in one statement (one transaction): the runs row is locked FOR SHARE, so an acquire
-- or a claim (which bump the epoch) waits for it or skips the run, and the row is inserted
-- only if the locked epoch is the caller's. Returns the run's epoch (NULL: no such run) and
-- whether the row was inserted (False with the caller's epoch: the key exists).
WITH fence AS (
    SELECT epoch FROM runs WHERE run_id = %(run_id)s FOR SHARE
), inserted AS (
    INSERT INTO ledger (key, run_id, tool_use_id, capability, status, started_at, finished_at,
        result, error)
    SELECT %(key)s::text, %(run_id)s::uuid, %(tool_use_id)s::text, %(capability)s::text,
        %(status)s::text, %(started_at)s::timestamptz, %(finished_at)s::timestamptz,
        %(result)s::json, %(error)s::text
    FROM fence WHERE fence.epoch = %(epoch)s
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT epoch FROM fence), EXISTS (SELECT 1 FROM inserted)

-- name: spend_lock
-- Serialises one principal's reservations (a transaction-level advisory lock).
SELECT pg_advisory_xact_lock(%s)

-- name: has_reservation
SELECT 1 FROM spend_reservations WHERE key = %s

-- name: insert_reservation
INSERT INTO spend_reservations (key, principal, amount_usd, at) VALUES (%s, %s, %s, %s)

-- name: request_cancel
-- Record a cancel request (sent again: its time is refreshed), forget those older than an
-- hour, and notify its id; all times are the database's, so requesters' clocks cannot disagree.
WITH old AS (
    DELETE FROM cancel_requests WHERE requested_at < now() - interval '1 hour'
), added AS (
    INSERT INTO cancel_requests (request_id, run_id, by_principal, scopes, reason, requested_at)
    VALUES (%(request_id)s, %(run_id)s, %(by)s, %(scopes)s, %(reason)s, now())
    ON CONFLICT (request_id) DO UPDATE SET requested_at = now()
)
SELECT pg_notify('fiduciary_cancel', %(request_id)s::text)

-- name: read_cancel
-- A request is honoured for two minutes after it was last sent (its sender resends every
-- second while it waits): an id seen on the channel cannot be replayed later.
SELECT run_id, by_principal, scopes, reason FROM cancel_requests
WHERE request_id = %s AND requested_at > now() - interval '2 minutes'

-- name: read_ranges
-- The events other processes committed, for the notified ranges of seqs.
SELECT e.run_id, e.payload
FROM unnest(%b::uuid[], %b::bigint[], %b::bigint[]) AS w(run_id, first_seq, last_seq)
JOIN events e ON e.run_id = w.run_id AND e.seq BETWEEN w.first_seq AND w.last_seq
ORDER BY e.run_id, e.seq
