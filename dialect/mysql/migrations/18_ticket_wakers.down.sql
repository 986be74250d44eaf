ALTER TABLE sqllock_tickets DROP KEY sqllock_tickets_waker_idx, DROP COLUMN seen, DROP COLUMN rung, DROP COLUMN waker;
ALTER TABLE sqllock_locks DROP COLUMN ticketed;
