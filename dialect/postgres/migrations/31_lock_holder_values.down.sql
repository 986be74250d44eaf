ALTER TABLE sqllock_locks DROP COLUMN IF EXISTS lock_value_token, DROP COLUMN IF EXISTS lock_value;
