DROP TABLE IF EXISTS sqllock_locks;
DROP SEQUENCE IF EXISTS sqllock_token_seq;
