DROP TRIGGER IF EXISTS sqllock_locks_raise_floor;
DROP TABLE IF EXISTS sqllock_token_floor;
DROP TABLE IF EXISTS sqllock_locks;
