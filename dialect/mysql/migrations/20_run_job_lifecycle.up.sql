-- sqllock run ledger, a job's life (package ledger), MySQL 8 / MariaDB 10.6+.
-- spec is the job's cron schedule ('' for none: a period, or occurrences
-- the caller names), as "CRON_TZ=ZONE EXPRESSION". paused_at is when the
-- job was last paused; resumed_at when it was resumed after (NULL while
-- paused): no occurrence between the two counts as missed. pending is
-- the key of a manual occurrence asked for (sqllock runs trigger) and not
-- run yet.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: the change is made only where
-- it is missing.
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_run_jobs' AND column_name = 'spec') = 0,
    'ALTER TABLE sqllock_run_jobs ADD COLUMN spec VARBINARY(255) NOT NULL DEFAULT '''', ADD COLUMN paused_at DATETIME(6) NULL, ADD COLUMN resumed_at DATETIME(6) NULL, ADD COLUMN pending VARBINARY(255) NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
