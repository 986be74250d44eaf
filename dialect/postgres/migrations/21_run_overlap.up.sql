-- sqllock run ledger, overlap across occurrences (package ledger), PostgreSQL.
-- An attempt is also 'skipped' (its occurrence came due while another
-- occurrence of its job ran, under the overlap policy skip) or 'replaced'
-- (it was running when a later occurrence of its job replaced it, under
-- the overlap policy replace). Both decide their occurrence.
ALTER TABLE sqllock_runs DROP CONSTRAINT IF EXISTS sqllock_runs_state_check;
ALTER TABLE sqllock_runs ADD CONSTRAINT sqllock_runs_state_check
    CHECK (state IN ('running', 'succeeded', 'failed', 'abandoned', 'skipped', 'replaced'));
