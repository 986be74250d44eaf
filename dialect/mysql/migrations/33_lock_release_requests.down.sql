ALTER TABLE sqllock_locks DROP COLUMN release_token, DROP COLUMN release_reason;
