ALTER TABLE sqllock_run_jobs DROP COLUMN pending;
ALTER TABLE sqllock_run_jobs DROP COLUMN resumed_at;
ALTER TABLE sqllock_run_jobs DROP COLUMN paused_at;
ALTER TABLE sqllock_run_jobs DROP COLUMN spec;
