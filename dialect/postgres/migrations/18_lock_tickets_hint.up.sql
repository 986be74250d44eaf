-- sqllock wake-ups of ticket holders, PostgreSQL.
--
-- Waiters with tickets (those of a fair lock or semaphore, and those of an
-- unfair one, whose tickets order wake-ups alone) mark the lock's row, or
-- the semaphore's head row, when they ask how long to wait. The last
-- release of a marked lock, or the release of a permit of a marked
-- semaphore, then reports it, and the releasing process wakes the process
-- of the name's oldest live ticket alone (a NOTIFY on that process's
-- channel). The releases of unmarked rows never read the ticket tables.
-- The mark stays set until the row is reaped. The waiters columns
-- (migrations 4 and 9) mark the rows whose releases are announced to every
-- waiting process, for waiters without tickets.
ALTER TABLE sqllock_locks ADD COLUMN IF NOT EXISTS ticketed boolean NOT NULL DEFAULT false;
ALTER TABLE sqllock_semaphores ADD COLUMN IF NOT EXISTS ticketed boolean NOT NULL DEFAULT false;
