-- Migration 0006: a run waiting for a person's answer (status awaiting_input).
--
-- A question the model asks (fiduciary.questions) is stored as an approval row whose executor
-- is 'person'; its answer leaves 'pending' like a decision, wakes the run (the decision
-- trigger) and makes it claimable (the runnable notification), as for a run awaiting approval.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;

ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN ('running',
    'awaiting_approval', 'awaiting_client_result', 'completed', 'failed', 'cancelled',
    'awaiting_input'));

ALTER TABLE approvals DROP CONSTRAINT approvals_executor_check;

ALTER TABLE approvals ADD CONSTRAINT approvals_executor_check
    CHECK (executor IN ('server', 'client', 'person'));

CREATE OR REPLACE FUNCTION fiduciary_wake_on_decision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE runs SET wake_at = COALESCE(wake_at, now())
    WHERE run_id = NEW.run_id
      AND status IN ('running', 'awaiting_approval', 'awaiting_client_result',
          'awaiting_input');
    RETURN NULL;
END
$$;

DROP TRIGGER runs_notify_runnable ON runs;

CREATE TRIGGER runs_notify_runnable AFTER INSERT OR UPDATE ON runs
    FOR EACH ROW WHEN (NEW.lease_owner IS NULL AND (NEW.status = 'running'
        OR (NEW.wake_at IS NOT NULL
            AND NEW.status IN ('awaiting_approval', 'awaiting_client_result',
                'awaiting_input'))))
    EXECUTE FUNCTION fiduciary_notify_runnable();
