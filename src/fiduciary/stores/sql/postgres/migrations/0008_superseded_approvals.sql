-- Migration 0008: an approval ends 'superseded' when its call is regenerated (fresh
-- arguments, such as a new quote, and a new approval for them: Agent.regenerate). The row
-- leaves 'pending' like a decision, so the decision trigger wakes its run, whose drive makes
-- the new approval.

ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;

ALTER TABLE approvals ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending',
    'approved', 'denied', 'expired', 'client_result', 'superseded'));
