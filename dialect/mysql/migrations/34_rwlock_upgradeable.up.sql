-- sqllock read/write locks, upgradeable reads (RWLock.AcquireUpgradeable,
-- Lock.Upgrade), MySQL/MariaDB. upgradeable is true on the holder row of
-- an upgradeable read (shared is true too): it coexists with plain
-- readers, and keeps writers and other upgradeable readers out, until its
-- owner turns it into the write lease (shared and upgradeable false, same
-- token) or releases it.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: the column is added only where
-- it is missing (the files may already have been applied by another
-- migration tool).
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_rwlock_holders' AND column_name = 'upgradeable') = 0,
    'ALTER TABLE sqllock_rwlock_holders ADD COLUMN upgradeable BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
