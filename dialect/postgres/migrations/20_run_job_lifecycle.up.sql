-- sqllock run ledger, a job's life (package ledger), PostgreSQL.
-- spec is the job's cron schedule ('' for none: a period, or occurrences
-- the caller names), as "CRON_TZ=ZONE EXPRESSION". paused_at is when the
-- job was last paused; resumed_at when it was resumed after (NULL while
-- paused): no occurrence between the two counts as missed. pending is
-- the key of a manual occurrence asked for (sqllock runs trigger) and not
-- run yet.
ALTER TABLE sqllock_run_jobs ADD COLUMN IF NOT EXISTS spec text NOT NULL DEFAULT '';
ALTER TABLE sqllock_run_jobs ADD COLUMN IF NOT EXISTS paused_at timestamptz;
ALTER TABLE sqllock_run_jobs ADD COLUMN IF NOT EXISTS resumed_at timestamptz;
ALTER TABLE sqllock_run_jobs ADD COLUMN IF NOT EXISTS pending text;
