ALTER TABLE sqllock_locks DROP COLUMN IF EXISTS release_reason, DROP COLUMN IF EXISTS release_token;
