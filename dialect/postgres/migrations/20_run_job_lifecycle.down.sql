ALTER TABLE sqllock_run_jobs DROP COLUMN IF EXISTS pending;
ALTER TABLE sqllock_run_jobs DROP COLUMN IF EXISTS resumed_at;
ALTER TABLE sqllock_run_jobs DROP COLUMN IF EXISTS paused_at;
ALTER TABLE sqllock_run_jobs DROP COLUMN IF EXISTS spec;
