-- sqllock wake-ups for waiters, MySQL 8 / MariaDB 10.6+ (see the README,
-- "Wake-ups on MySQL and MariaDB").
--
-- A process with waiters keeps one "bell" connection asleep in a marked
-- SELECT SLEEP and registers here the names it waits for, under the bell's
-- CONNECTION_ID() and a random tag that the sleeping statement carries. A
-- release that finds a row for its name counts a ring in it (rung) and ends
-- the bell's statement with KILL QUERY, after checking in the process list
-- that the connection runs a statement with that tag; the woken bell reads
-- the rows it has not seen all rings of, tells its waiters, and records
-- what it saw (seen). Rows expire unless their bell refreshes them: those
-- of a crashed process are deleted by the next bell that starts.
CREATE TABLE IF NOT EXISTS sqllock_waiters (
    name       VARBINARY(255)  NOT NULL,
    bell       BIGINT UNSIGNED NOT NULL,
    tag        CHAR(16)        NOT NULL,
    rung       BIGINT UNSIGNED NOT NULL,
    seen       BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (name, bell),
    KEY sqllock_waiters_bell_idx (bell),
    KEY sqllock_waiters_expires_at_idx (expires_at)
) ENGINE = InnoDB;

-- The waiters hint: set on a lock's row before a process registers for its
-- name, so that only the releases of rows marked this way look for
-- registrations to ring. It stays set until the row is reaped.
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: each column is added only where
-- it is missing (the files may already have been applied by another
-- migration tool).
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'waiters') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN waiters BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_versions' AND column_name = 'waiters') = 0,
    'ALTER TABLE sqllock_versions ADD COLUMN waiters BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
