-- sqllock pessimistic (row-lock) locks, PostgreSQL.
-- One row per lock name, created on first use and never deleted. A lock is
-- the row lock (FOR UPDATE / FOR SHARE) of an open transaction: nothing in
-- the row changes while it is held, and it ends with the transaction or its
-- connection. Tokens come from a sequence, drawn after the row lock is
-- granted; a sequence does not roll back, so no token is handed out twice.
CREATE SEQUENCE IF NOT EXISTS sqllock_rowlock_token_seq AS bigint MINVALUE 1 CACHE 1 NO CYCLE;

CREATE TABLE IF NOT EXISTS sqllock_rowlocks (
    name text NOT NULL PRIMARY KEY
);
