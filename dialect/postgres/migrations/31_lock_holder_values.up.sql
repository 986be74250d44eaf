-- A lock's value (sqllock's Lock.SetValue), PostgreSQL: what the holder
-- says about its hold ("host-a, v1.2"), read by anyone without acquiring.
-- lock_value_token is the token it was set for, so a takeover (a new
-- token) never shows an earlier holder's value. Columns of their own,
-- apart from an election's value, so a lock with a value is not taken for
-- a leader. Both stay NULL until a holder sets a value.
ALTER TABLE sqllock_locks ADD COLUMN IF NOT EXISTS lock_value text, ADD COLUMN IF NOT EXISTS lock_value_token bigint;
