-- sqllock run ledger, backfills asked of a job's replicas (package ledger,
-- Ledger.RequestBackfill), MySQL 8 / MariaDB 10.6+. backfill_from and
-- backfill_to are the first and last occurrence keys (ledger.TimeFormat)
-- of a backfill asked for and not run yet (NULL for none): the job's next
-- replica to run it runs each occurrence of its schedule in the range,
-- then clears them.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: the change is made only where
-- it is missing.
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_run_jobs' AND column_name = 'backfill_from') = 0,
    'ALTER TABLE sqllock_run_jobs ADD COLUMN backfill_from VARBINARY(64) NULL, ADD COLUMN backfill_to VARBINARY(64) NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
