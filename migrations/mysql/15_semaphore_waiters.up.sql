-- sqllock wake-ups for semaphore waiters, MySQL 8 / MariaDB 10.6+ (see the
-- README, "Wake-ups on MySQL and MariaDB").
--
-- The waiters hint of migration 8, for semaphores: a process that waits
-- for a semaphore name marks its head row and its holder rows before it
-- registers for the name; a grant copies the head's mark into the holder
-- row it adds, and only the release of a marked holder row looks for
-- registrations to ring. The marks stay (head rows are never reaped).
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: each column is added only where
-- it is missing.
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_semaphores' AND column_name = 'waiters') = 0,
    'ALTER TABLE sqllock_semaphores ADD COLUMN waiters BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_semaphore_holders' AND column_name = 'waiters') = 0,
    'ALTER TABLE sqllock_semaphore_holders ADD COLUMN waiters BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
