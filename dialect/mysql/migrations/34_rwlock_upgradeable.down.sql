ALTER TABLE sqllock_rwlock_holders DROP COLUMN upgradeable;
