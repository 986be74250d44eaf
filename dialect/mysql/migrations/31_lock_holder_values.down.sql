ALTER TABLE sqllock_locks DROP COLUMN lock_value_token, DROP COLUMN lock_value;
