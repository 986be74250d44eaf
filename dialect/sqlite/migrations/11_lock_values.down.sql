DROP TRIGGER IF EXISTS sqllock_locks_drop_value;
DROP TABLE IF EXISTS sqllock_lock_values;
