DROP TABLE IF EXISTS sqllock_rwlock_holders;
DROP TABLE IF EXISTS sqllock_rwlock_heads;
