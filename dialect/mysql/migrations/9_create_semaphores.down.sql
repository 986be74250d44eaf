DROP TABLE IF EXISTS sqllock_semaphore_holders;
DROP TABLE IF EXISTS sqllock_semaphores;
