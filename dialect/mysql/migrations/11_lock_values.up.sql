-- Leader election (sqllock.NewElection) stores the leader's value with its
-- lease. value_token is the token the value was proclaimed for: a takeover
-- gives the row a new token, so a value left by an earlier holder is never
-- read as the new holder's. Both stay NULL for plain locks.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: each column is added only where
-- it is missing (the files may already have been applied by another
-- migration tool).
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'value') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN value BLOB NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'value_token') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN value_token BIGINT NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
