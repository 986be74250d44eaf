DROP PROCEDURE IF EXISTS sqllock_remaining;
DROP PROCEDURE IF EXISTS sqllock_guard;
DROP PROCEDURE IF EXISTS sqllock_release;
DROP PROCEDURE IF EXISTS sqllock_renew;
DROP PROCEDURE IF EXISTS sqllock_try_acquire;
DROP PROCEDURE IF EXISTS sqllock_ring;
DROP PROCEDURE IF EXISTS sqllock_check_lease;
