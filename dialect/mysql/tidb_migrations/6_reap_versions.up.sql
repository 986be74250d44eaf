-- The reaper deletes released and expired rows of the version table, as it
-- does those of the lock table (rows of names used once would otherwise stay
-- forever). A name's next row must still start above every version the name
-- had: it starts above the version floor, the largest version of any
-- deleted row, which the reaper locks before deleting and raises in the same
-- transaction, and which a new row reads under a shared lock in the
-- statement that inserts it. Delete rows of the version table only through
-- the reaper, which keeps to this.
--
-- The floor starts at the largest version in use, as if every existing
-- row had been reaped: a safe start, since versions only have to grow.
-- Processes of an older sqllock create rows at version 1 without reading
-- the floor: upgrade them all before a reaper of this version runs.
CREATE TABLE sqllock_version_floor (
    id      TINYINT NOT NULL PRIMARY KEY,
    version BIGINT  NOT NULL
) ENGINE = InnoDB;

INSERT INTO sqllock_version_floor (id, version)
SELECT 1, COALESCE(MAX(version), 0) FROM sqllock_versions;

-- The reaper's batches are the rows that expired first.
CREATE INDEX sqllock_versions_expires_at_idx ON sqllock_versions (expires_at);
