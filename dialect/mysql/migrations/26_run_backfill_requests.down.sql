ALTER TABLE sqllock_run_jobs DROP COLUMN backfill_to, DROP COLUMN backfill_from;
