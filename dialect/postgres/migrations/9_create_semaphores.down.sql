DROP SEQUENCE IF EXISTS sqllock_semaphore_token_seq;
DROP TABLE IF EXISTS sqllock_semaphore_holders;
DROP TABLE IF EXISTS sqllock_semaphores;
