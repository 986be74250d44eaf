-- sqllock semaphores, limits set live (Semaphore.SetLimit), MySQL 8 /
-- MariaDB 10.6+. lim_fixed is true once a name's limit was set by
-- SetLimit: every grant of the name then counts against lim, whatever
-- limit the Semaphore asking was built with. While it is false, the grant
-- that finds the name without live holders sets lim to its Semaphore's
-- limit, and a grant beside holders counts against the limit they were
-- granted under.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: the change is made only where
-- it is missing.
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_semaphores' AND column_name = 'lim_fixed') = 0,
    'ALTER TABLE sqllock_semaphores ADD COLUMN lim_fixed BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
