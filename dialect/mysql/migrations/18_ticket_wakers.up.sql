-- sqllock wake-ups of ticket holders, MySQL 8 / MariaDB 10.6+ (see
-- migration 18 of PostgreSQL, which does the same with NOTIFY).
--
-- Waiters with tickets (those of a fair lock, and those of an unfair one,
-- whose tickets order wake-ups alone) mark the lock's row (ticketed) when
-- they ask how long to wait. The last release of a marked lock reports it,
-- and the releasing process rings the bell of the process of the name's
-- oldest live ticket alone: it counts a ring in the ticket (rung), and ends
-- the bell's wait with KILL QUERY. A ticket records its process's bell by
-- the bell's tag (waker), whose user lock the bell's connection holds; the
-- bell announces the rings of its tickets it has not seen (seen). The mark
-- stays set until the row is reaped. MySQL 8 has no ADD COLUMN IF NOT
-- EXISTS: each change is made only where it is missing.
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_locks' AND column_name = 'ticketed') = 0,
    'ALTER TABLE sqllock_locks ADD COLUMN ticketed BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_tickets' AND column_name = 'waker') = 0,
    'ALTER TABLE sqllock_tickets ADD COLUMN waker VARBINARY(32) NOT NULL DEFAULT '''', ADD COLUMN rung BIGINT NOT NULL DEFAULT 0, ADD COLUMN seen BIGINT NOT NULL DEFAULT 0, ADD KEY sqllock_tickets_waker_idx (waker)',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;
