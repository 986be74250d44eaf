-- sqllock semaphores, SQLite 3.42+.
-- One head row per semaphore name: the limit its holders were granted under
-- and the name's last token. Head rows are never deleted, so a name's
-- tokens keep growing across reaping. Times are integer microseconds since
-- the Unix epoch on the host's clock.
CREATE TABLE IF NOT EXISTS sqllock_semaphores (
    name  TEXT    NOT NULL PRIMARY KEY,
    lim   INTEGER NOT NULL CHECK (lim > 0),
    token INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- One row per holder: a lease like a row of the lock table.
CREATE TABLE IF NOT EXISTS sqllock_semaphore_holders (
    name        TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    holds       INTEGER NOT NULL CHECK (holds >= 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (name, owner)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS sqllock_semaphore_holders_expires_at_idx ON sqllock_semaphore_holders (expires_at);
