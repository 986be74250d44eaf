-- sqllock lock table, PostgreSQL.
-- Fencing tokens come from one sequence, so they only ever grow, across
-- releases, reaping and server restarts. CACHE 1 keeps them ordered by grant
-- time across sessions.
CREATE SEQUENCE IF NOT EXISTS sqllock_token_seq AS bigint MINVALUE 1 CACHE 1 NO CYCLE;

-- One row per lock name. A released lock keeps its row (holds = 0,
-- expires_at = -infinity) until the reaper deletes it.
CREATE TABLE IF NOT EXISTS sqllock_locks (
    name        text        NOT NULL PRIMARY KEY,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    holds       integer     NOT NULL CHECK (holds >= 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS sqllock_locks_expires_at_idx ON sqllock_locks (expires_at);
