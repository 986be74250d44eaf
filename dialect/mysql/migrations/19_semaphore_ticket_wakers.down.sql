ALTER TABLE sqllock_semaphore_tickets DROP KEY sqllock_semaphore_tickets_waker_idx, DROP COLUMN seen, DROP COLUMN rung, DROP COLUMN waker;
ALTER TABLE sqllock_semaphore_holders DROP COLUMN ticketed;
ALTER TABLE sqllock_semaphores DROP COLUMN ticketed;
