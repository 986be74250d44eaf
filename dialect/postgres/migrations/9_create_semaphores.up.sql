-- sqllock semaphores, PostgreSQL.
-- One head row per semaphore name: the limit its holders were granted under,
-- and the waiters hint (release announces freed permits with NOTIFY only
-- for names someone waited for). Acquires lock the head row, which
-- serialises the grants of a name. Head rows are never deleted.
CREATE TABLE IF NOT EXISTS sqllock_semaphores (
    name    text    NOT NULL PRIMARY KEY,
    lim     integer NOT NULL CHECK (lim > 0),
    waiters boolean NOT NULL DEFAULT false
);

-- One row per holder: a lease like a row of the lock table. A released
-- permit keeps its row (holds = 0, expires_at = -infinity) until the next
-- acquire of the name or the reaper deletes it.
CREATE TABLE IF NOT EXISTS sqllock_semaphore_holders (
    name        text        NOT NULL,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    holds       integer     NOT NULL CHECK (holds >= 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);

CREATE INDEX IF NOT EXISTS sqllock_semaphore_holders_expires_at_idx ON sqllock_semaphore_holders (expires_at);

-- Tokens come from a sequence, drawn under the head row's lock: a name's
-- tokens grow with its grants, across releases, reaping and restarts.
CREATE SEQUENCE IF NOT EXISTS sqllock_semaphore_token_seq AS bigint MINVALUE 1 CACHE 1 NO CYCLE;
