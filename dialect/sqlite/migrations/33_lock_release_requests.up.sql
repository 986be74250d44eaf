-- A request that a lock's holder release it (sqllock's
-- Table.RequestRelease), SQLite: one row per name, with its reason and the
-- token it was asked of, so that a takeover (a new token) never inherits
-- it. The holder reads it back with its renewals. A lock row's deletion
-- deletes its request in the same statement.
CREATE TABLE IF NOT EXISTS sqllock_release_requests (
    name   TEXT    NOT NULL PRIMARY KEY,
    token  INTEGER NOT NULL,
    reason TEXT    NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS sqllock_locks_drop_release_request AFTER DELETE ON sqllock_locks BEGIN
    DELETE FROM sqllock_release_requests WHERE name = OLD.name; END;
