-- sqllock run ledger, a job's life (package ledger), SQLite.
-- spec is the job's cron schedule ('' for none: a period, or occurrences
-- the caller names), as "CRON_TZ=ZONE EXPRESSION". paused_at is when the
-- job was last paused; resumed_at when it was resumed after (NULL while
-- paused): no occurrence between the two counts as missed. pending is
-- the key of a manual occurrence asked for (sqllock runs trigger) and not
-- run yet. Times are integer microseconds since the Unix epoch.
--
-- SQLite has no ADD COLUMN IF NOT EXISTS: sqllock's migrator skips an
-- ADD COLUMN whose column exists, so that sqllock.Migrate applies this
-- file over the objects a pipeline of your own created from it.
ALTER TABLE sqllock_run_jobs ADD COLUMN spec TEXT NOT NULL DEFAULT '';
ALTER TABLE sqllock_run_jobs ADD COLUMN paused_at INTEGER;
ALTER TABLE sqllock_run_jobs ADD COLUMN resumed_at INTEGER;
ALTER TABLE sqllock_run_jobs ADD COLUMN pending TEXT;
