DROP TABLE IF EXISTS sqllock_token_floor;
DROP TABLE IF EXISTS sqllock_locks;
