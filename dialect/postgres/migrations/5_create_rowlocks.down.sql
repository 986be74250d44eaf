DROP TABLE IF EXISTS sqllock_rowlocks;
DROP SEQUENCE IF EXISTS sqllock_rowlock_token_seq;
