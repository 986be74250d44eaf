-- Leader election (sqllock.NewElection) stores the leader's value with its
-- lease: one row per name, with the token the value was proclaimed for. A
-- takeover gives the lock's row a new token, so a value left by an earlier
-- holder is never read as the new holder's. (A table of its own rather
-- than columns of sqllock_locks: SQLite has no ADD COLUMN IF NOT EXISTS,
-- and these files must apply over objects another tool created.) A lock
-- row's deletion deletes its value in the same statement.
CREATE TABLE IF NOT EXISTS sqllock_lock_values (
    name  TEXT    NOT NULL PRIMARY KEY,
    token INTEGER NOT NULL,
    value TEXT    NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS sqllock_locks_drop_value AFTER DELETE ON sqllock_locks BEGIN
    DELETE FROM sqllock_lock_values WHERE name = OLD.name; END;
