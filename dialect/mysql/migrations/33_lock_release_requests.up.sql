-- A request that a lock's holder release it (sqllock's
-- Table.RequestRelease), MySQL/MariaDB: its reason, and the token it was
-- asked of, so that a takeover (a new token) never inherits it. The
-- holder reads it back with its renewals. Both stay NULL until someone
-- asks.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: each column is added only where
-- it is missing (the files may already have been applied by another
-- migration tool).
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'release_reason') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN release_reason BLOB NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'release_token') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN release_token BIGINT NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
