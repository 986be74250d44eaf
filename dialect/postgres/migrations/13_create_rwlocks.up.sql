-- sqllock read/write locks, PostgreSQL.
-- One head row per name, created on first use and kept: it serialises the
-- grants of the name (each locks it first), counts the name's tokens, keeps
-- a waiting writer's intent (which keeps new readers out until it expires
-- or is withdrawn), and the waiters hint that makes releases NOTIFY.
CREATE TABLE IF NOT EXISTS sqllock_rwlock_heads (
    name              text        NOT NULL PRIMARY KEY,
    token             bigint      NOT NULL DEFAULT 0,
    intent_owner      text        NOT NULL DEFAULT '',
    intent_expires_at timestamptz NOT NULL DEFAULT '-infinity',
    waiters           boolean     NOT NULL DEFAULT false
);

-- One row per holder (reader or writer) of a name: its lease. A released
-- row keeps no hold and expires at -infinity until the next grant of the
-- name or the reaper deletes it.
CREATE TABLE IF NOT EXISTS sqllock_rwlock_holders (
    name        text        NOT NULL,
    owner       text        NOT NULL,
    shared      boolean     NOT NULL,
    token       bigint      NOT NULL,
    holds       integer     NOT NULL CHECK (holds >= 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);

CREATE INDEX IF NOT EXISTS sqllock_rwlock_holders_expires_at_idx ON sqllock_rwlock_holders (expires_at);
