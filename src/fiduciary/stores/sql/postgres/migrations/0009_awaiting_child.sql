-- Migration 0009: a run waiting for a run it delegated to (status awaiting_child).
--
-- A delegate call whose child run does not end at once leaves its run suspended, holding no
-- lease (fiduciary.delegation). It is no approval: nothing wakes it through the decision
-- trigger; the child's end is delivered by whoever drives the child, and the sweep finds a
-- waiting run whose child has ended. Only the status check changes.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;

ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN ('running',
    'awaiting_approval', 'awaiting_client_result', 'completed', 'failed', 'cancelled',
    'awaiting_input', 'awaiting_child'));
