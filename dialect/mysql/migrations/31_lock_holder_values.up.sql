-- A lock's value (sqllock's Lock.SetValue), MySQL/MariaDB: what the holder
-- says about its hold ("host-a, v1.2"), read by anyone without acquiring.
-- lock_value_token is the token it was set for, so a takeover (a new
-- token) never shows an earlier holder's value. Columns of their own,
-- apart from an election's value, so a lock with a value is not taken for
-- a leader. Both stay NULL until a holder sets a value.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: each column is added only where
-- it is missing (the files may already have been applied by another
-- migration tool).
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'lock_value') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN lock_value BLOB NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'lock_value_token') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN lock_value_token BIGINT NULL',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
