-- Leader election (sqllock.NewElection) stores the leader's value with its
-- lease. value_token is the token the value was proclaimed for: a takeover
-- gives the row a new token, so a value left by an earlier holder is never
-- read as the new holder's. Both stay NULL for plain locks.
ALTER TABLE sqllock_locks ADD COLUMN IF NOT EXISTS value text, ADD COLUMN IF NOT EXISTS value_token bigint;
