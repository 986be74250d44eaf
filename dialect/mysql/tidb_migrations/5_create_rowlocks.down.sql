DROP TABLE IF EXISTS sqllock_rowlock_tokens;
DROP TABLE IF EXISTS sqllock_rowlocks;
