-- The states of version 21 go: a replaced attempt becomes abandoned (its
-- lease was ended), a skipped one (which never ran) is deleted.
DELETE FROM sqllock_runs WHERE state = 'skipped';
UPDATE sqllock_runs SET state = 'abandoned' WHERE state = 'replaced';
ALTER TABLE sqllock_runs DROP CONSTRAINT IF EXISTS sqllock_runs_state_check;
ALTER TABLE sqllock_runs ADD CONSTRAINT sqllock_runs_state_check
    CHECK (state IN ('running', 'succeeded', 'failed', 'abandoned'));
