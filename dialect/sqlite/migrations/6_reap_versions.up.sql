-- The reaper deletes released and expired rows of the version table, as it
-- does those of the lock table (rows of names used once would otherwise stay
-- forever). A name's next row must still start above every version the name
-- had: it starts above the version floor, the largest version of any
-- deleted row.
--
-- The floor starts at the largest version in use, as if every existing
-- row had been reaped: a safe start, since versions only have to grow.
-- Processes of an older sqllock create rows at version 1 without reading
-- the floor: upgrade them all before a reaper of this version runs.
CREATE TABLE IF NOT EXISTS sqllock_version_floor (
    id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
) STRICT;

INSERT OR IGNORE INTO sqllock_version_floor (id, version)
SELECT 1, COALESCE(max(version), 0) FROM sqllock_versions;

-- The reaper's batches are the rows that expired first.
CREATE INDEX IF NOT EXISTS sqllock_versions_expires_at_idx ON sqllock_versions (expires_at);

-- Every deletion raises the floor in the same statement, so no way of
-- deleting rows (the reaper, or an operator by hand) can let a name's next
-- version fall back. The body ends on the line of END because sqllock's
-- migration runner cuts files at lines that end in ';'.
CREATE TRIGGER IF NOT EXISTS sqllock_versions_raise_floor AFTER DELETE ON sqllock_versions BEGIN
    UPDATE sqllock_version_floor SET version = max(version, OLD.version) WHERE id = 1; END;
