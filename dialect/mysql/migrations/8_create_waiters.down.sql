ALTER TABLE sqllock_versions DROP COLUMN waiters;
ALTER TABLE sqllock_locks DROP COLUMN waiters;
DROP TABLE IF EXISTS sqllock_waiters;
