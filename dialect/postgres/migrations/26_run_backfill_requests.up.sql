-- sqllock run ledger, backfills asked of a job's replicas (package ledger,
-- Ledger.RequestBackfill), PostgreSQL. backfill_from and backfill_to are
-- the first and last occurrence keys (ledger.TimeFormat) of a backfill
-- asked for and not run yet (NULL for none): the job's next replica to
-- run it runs each occurrence of its schedule in the range, then clears
-- them.
ALTER TABLE sqllock_run_jobs ADD COLUMN IF NOT EXISTS backfill_from text;
ALTER TABLE sqllock_run_jobs ADD COLUMN IF NOT EXISTS backfill_to text;
