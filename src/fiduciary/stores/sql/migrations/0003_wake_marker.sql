-- Migration 0003: the wake marker (runs.wake_at), as PostgreSQL has it.
--
-- A decision on a pending approval (approved, denied, expired, or a client's result), made by
-- any process on this file, marks its run: wake_at is set in the same transaction. The commit
-- that sets the run running again (the first write of the drive that takes the decision up)
-- or ends it clears the mark; a drive that dies before that leaves it, so once its lease lapses
-- the run is found again (runs_to_resume). The value is only a mark; nothing compares it.

ALTER TABLE runs ADD COLUMN wake_at TEXT;

CREATE INDEX runs_runnable ON runs (created_at, run_id)
    WHERE status = 'running' OR wake_at IS NOT NULL;

CREATE TRIGGER approvals_wake_run AFTER UPDATE OF status ON approvals
    FOR EACH ROW WHEN OLD.status = 'pending' AND NEW.status <> 'pending'
BEGIN
    UPDATE runs SET wake_at = COALESCE(wake_at, NEW.decided_at, NEW.created_at)
    WHERE run_id = NEW.run_id
      AND status IN ('running', 'awaiting_approval', 'awaiting_client_result');
END;
