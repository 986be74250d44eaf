-- sqllock wake-ups of semaphore ticket holders, MySQL 8 / MariaDB 10.6+: the
-- semaphores' side of migration 18.
--
-- Waiters with tickets of a semaphore (those of a fair semaphore, and those
-- of an unfair one, whose tickets order wake-ups alone) mark its head row
-- and then its holder rows (ticketed) before they first ask how long to
-- wait; a grant copies the head's mark into the holder row it adds, as it
-- copies the waiters hint of migration 15. The release that frees a marked
-- holder row reports it, and the releasing process rings the bell of the
-- process of the name's oldest live ticket alone (waker, rung, seen: as in
-- migration 18). The marks stay (head rows are never reaped).
--
-- Ticket ids start at 2^62, so that they never meet the lock tickets' ids:
-- a bell announces a ticket's wake-up by its id alone.
--
-- MySQL 8 has no ADD COLUMN IF NOT EXISTS: each change is made only where
-- it is missing.
SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_semaphores' AND column_name = 'ticketed') = 0,
    'ALTER TABLE sqllock_semaphores ADD COLUMN ticketed BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_semaphore_holders' AND column_name = 'ticketed') = 0,
    'ALTER TABLE sqllock_semaphore_holders ADD COLUMN ticketed BOOLEAN NOT NULL DEFAULT FALSE',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

SET @sqllock_ddl = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'sqllock_semaphore_tickets' AND column_name = 'waker') = 0,
    'ALTER TABLE sqllock_semaphore_tickets ADD COLUMN waker VARBINARY(32) NOT NULL DEFAULT '''', ADD COLUMN rung BIGINT NOT NULL DEFAULT 0, ADD COLUMN seen BIGINT NOT NULL DEFAULT 0, ADD KEY sqllock_semaphore_tickets_waker_idx (waker)',
    'DO 0');
PREPARE sqllock_ddl FROM @sqllock_ddl;
EXECUTE sqllock_ddl;
DEALLOCATE PREPARE sqllock_ddl;

ALTER TABLE sqllock_semaphore_tickets AUTO_INCREMENT = 4611686018427387904;
