ALTER TABLE sqllock_locks DROP COLUMN value_token, DROP COLUMN value;
