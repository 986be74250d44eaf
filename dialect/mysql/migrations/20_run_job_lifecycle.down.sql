ALTER TABLE sqllock_run_jobs DROP COLUMN pending, DROP COLUMN resumed_at, DROP COLUMN paused_at, DROP COLUMN spec;
