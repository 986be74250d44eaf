-- sqllock read/write locks, SQLite 3.42+. Times are integer microseconds
-- since the Unix epoch on the host's clock.
-- One head row per name, created on first use and kept: it counts the
-- name's tokens and keeps a waiting writer's intent (which keeps new
-- readers out until it expires or is withdrawn). Grants take turns under
-- SQLite's write lock.
CREATE TABLE IF NOT EXISTS sqllock_rwlock_heads (
    name              TEXT    NOT NULL PRIMARY KEY,
    token             INTEGER NOT NULL DEFAULT 0,
    intent_owner      TEXT    NOT NULL DEFAULT '',
    intent_expires_at INTEGER NOT NULL DEFAULT 0,
    waiters           INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;

-- One row per holder (reader or writer) of a name: its lease.
CREATE TABLE IF NOT EXISTS sqllock_rwlock_holders (
    name        TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    shared      INTEGER NOT NULL,
    token       INTEGER NOT NULL,
    holds       INTEGER NOT NULL CHECK (holds >= 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (name, owner)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS sqllock_rwlock_holders_expires_at_idx ON sqllock_rwlock_holders (expires_at);
