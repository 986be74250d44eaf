-- sqllock wake-ups for semaphore and read/write lock waiters, MySQL 8 /
-- MariaDB 10.6+ (see the README, "Wake-ups on MySQL and MariaDB").
--
-- The waiters hint of migration 8, for semaphores and read/write locks: a
-- process that waits for a name marks its head row and its holder rows
-- before it registers for the name; a grant copies the head's mark into
-- the holder row it adds, and only the release of a marked holder row looks
-- for registrations to ring. The marks stay (head rows are never reaped).
-- The read/write locks' head rows have the column since migration 13.
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

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_rwlock_holders' AND column_name = 'waiters') = 0,
    'ALTER TABLE sqllock_rwlock_holders ADD COLUMN waiters BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
