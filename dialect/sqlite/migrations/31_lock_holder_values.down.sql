DROP TRIGGER IF EXISTS sqllock_locks_drop_holder_value;
DROP TABLE IF EXISTS sqllock_lock_holder_values;
