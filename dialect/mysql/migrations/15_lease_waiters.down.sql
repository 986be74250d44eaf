ALTER TABLE sqllock_rwlock_holders DROP COLUMN waiters;
ALTER TABLE sqllock_semaphore_holders DROP COLUMN waiters;
ALTER TABLE sqllock_semaphores DROP COLUMN waiters;
