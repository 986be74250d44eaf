DROP FUNCTION IF EXISTS sqllock_remaining(text);
DROP FUNCTION IF EXISTS sqllock_guard(text, text, bigint);
DROP FUNCTION IF EXISTS sqllock_release(text, text, bigint);
DROP FUNCTION IF EXISTS sqllock_renew(text, text, bigint, interval);
DROP FUNCTION IF EXISTS sqllock_try_acquire(text, text, interval);
DROP FUNCTION IF EXISTS sqllock_check_lease(text, text, interval);
