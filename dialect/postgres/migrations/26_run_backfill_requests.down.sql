ALTER TABLE sqllock_run_jobs DROP COLUMN IF EXISTS backfill_to;
ALTER TABLE sqllock_run_jobs DROP COLUMN IF EXISTS backfill_from;
