-- A request that a lock's holder release it (sqllock's
-- Table.RequestRelease), PostgreSQL: its reason, and the token it was
-- asked of, so that a takeover (a new token) never inherits it. The
-- holder reads it back with its renewals. Both stay NULL until someone
-- asks.
ALTER TABLE sqllock_locks ADD COLUMN IF NOT EXISTS release_reason text, ADD COLUMN IF NOT EXISTS release_token bigint;
