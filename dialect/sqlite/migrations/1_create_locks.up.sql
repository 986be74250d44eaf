-- sqllock lock table, SQLite 3.42+.
-- Times are integer microseconds since the Unix epoch on the host's clock.
-- Names and owners are TEXT, compared byte for byte (BINARY collation), as on
-- PostgreSQL. A released lock keeps its row (holds = 0, expires_at = 0) until
-- the reaper deletes it.
CREATE TABLE IF NOT EXISTS sqllock_locks (
    name        TEXT    NOT NULL PRIMARY KEY,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    holds       INTEGER NOT NULL CHECK (holds >= 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS sqllock_locks_expires_at_idx ON sqllock_locks (expires_at);

-- The largest token of any deleted row. A new row starts above it, which
-- keeps tokens growing per name across reaping.
CREATE TABLE IF NOT EXISTS sqllock_token_floor (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    token INTEGER NOT NULL
) STRICT;

INSERT OR IGNORE INTO sqllock_token_floor (id, token) VALUES (1, 0);

-- Every deletion raises the floor in the same statement, so no way of
-- deleting rows (the reaper, or an operator by hand) can let a name's next
-- token fall back. The body ends on the line of END because sqllock's
-- migration runner cuts files at lines that end in ';'.
CREATE TRIGGER IF NOT EXISTS sqllock_locks_raise_floor AFTER DELETE ON sqllock_locks BEGIN
    UPDATE sqllock_token_floor SET token = max(token, OLD.token) WHERE id = 1; END;
