DROP TRIGGER IF EXISTS sqllock_locks_drop_release_request;
DROP TABLE IF EXISTS sqllock_release_requests;
