-- A lock's value (sqllock's Lock.SetValue), SQLite: what the holder says
-- about its hold ("host-a, v1.2"), read by anyone without acquiring. One
-- row per name, with the token the value was set for, so a takeover (a
-- new token) never shows an earlier holder's value. A table of its own,
-- apart from an election's values, so a lock with a value is not taken
-- for a leader. A lock row's deletion deletes its value in the same
-- statement.
CREATE TABLE IF NOT EXISTS sqllock_lock_holder_values (
    name  TEXT    NOT NULL PRIMARY KEY,
    token INTEGER NOT NULL,
    value TEXT    NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS sqllock_locks_drop_holder_value AFTER DELETE ON sqllock_locks BEGIN
    DELETE FROM sqllock_lock_holder_values WHERE name = OLD.name; END;
