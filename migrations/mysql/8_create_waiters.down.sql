DROP TABLE IF EXISTS sqllock_waiters;
