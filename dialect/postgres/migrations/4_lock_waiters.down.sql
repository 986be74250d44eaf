ALTER TABLE sqllock_locks DROP COLUMN IF EXISTS waiters;
