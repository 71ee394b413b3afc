-- Migration 0008: a run waiting for a person's answer (status awaiting_input).
--
-- A question the model asks (fiduciary.questions, executor 'person') is stored as an approval
-- row; its answer leaves 'pending' like a decision, and marks its run for resuming: the wake
-- trigger now also wakes a run awaiting input. (runs.status and approvals.executor have no
-- CHECK in SQLite: nothing else changes.)

DROP TRIGGER approvals_wake_run;

CREATE TRIGGER approvals_wake_run AFTER UPDATE OF status ON approvals
    FOR EACH ROW WHEN OLD.status = 'pending' AND NEW.status <> 'pending'
BEGIN
    UPDATE runs SET wake_at = COALESCE(wake_at, NEW.decided_at, NEW.created_at)
    WHERE run_id = NEW.run_id
      AND status IN ('running', 'awaiting_approval', 'awaiting_client_result',
          'awaiting_input');
END;
