-- sqllock's lock protocol as stored procedures, MySQL 8 / MariaDB 10.6+
-- (docs/protocol.md): a client in any language takes, renews, releases and
-- guards the locks of sqllock_locks through them, excluding Go's
-- sqllock.Table on the same names. Each procedure runs the statements of
-- the Go library's lock table (dialect/mysql/sql.go, and the ring of
-- dialect/mysql/wake*.go after a release) with the same rows, tokens and
-- database-clock expiry; TTLs are BIGINT microseconds, as the library's
-- statements take them.
--
-- They are procedures, not functions: a function that writes cannot be
-- created on a server with binary logging unless it is declared
-- DETERMINISTIC (these are not) or log_bin_trust_function_creators is
-- set, and the statements of a procedure called in autocommit commit one
-- by one, so that a release commits before it wakes the waiters. Each
-- answers with a result set of one row, except sqllock_guard, which
-- answers nothing or fails.
--
-- They run as their definer (SQL SECURITY DEFINER, the user that ran the
-- migrations), so a user with EXECUTE on them and no privilege on the
-- tables can lock. Run by golang-migrate's mysql driver, this file needs
-- multiStatements=true, as the other migrations do; sqllock.Migrate
-- splits it itself. TiDB has no stored routines: its migrations
-- (tidb_migrations) have none.
--
-- Bad input changes nothing and fails with SQLSTATE 22004 (a NULL
-- argument) or 22023 (an empty name or owner, one longer than 255 bytes, a
-- TTL of zero or less), MySQL error 1644.
DROP PROCEDURE IF EXISTS sqllock_check_lease;
DROP PROCEDURE IF EXISTS sqllock_ring;
DROP PROCEDURE IF EXISTS sqllock_try_acquire;
DROP PROCEDURE IF EXISTS sqllock_renew;
DROP PROCEDURE IF EXISTS sqllock_release;
DROP PROCEDURE IF EXISTS sqllock_guard;
DROP PROCEDURE IF EXISTS sqllock_remaining;

-- sqllock_check_lease checks a name, an owner and, unless it is NULL, a
-- TTL in microseconds. Parameters are LONGBLOB so that an over-long name
-- arrives whole, to be refused here, rather than cut to a valid one.
CREATE PROCEDURE sqllock_check_lease(IN lock_name LONGBLOB, IN lock_owner LONGBLOB, IN ttl_us BIGINT)
NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
COMMENT 'sqllock: checks the arguments of the lock protocol'
BEGIN
    DECLARE msg VARCHAR(128);
    IF lock_name IS NULL OR lock_owner IS NULL THEN
        SIGNAL SQLSTATE '22004' SET MESSAGE_TEXT = 'sqllock: the lock name and the owner must not be NULL';
    END IF;
    IF LENGTH(lock_name) NOT BETWEEN 1 AND 255 THEN
        SET msg = CONCAT('sqllock: invalid lock name: ', LENGTH(lock_name), ' bytes, want 1 to 255');
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = msg;
    END IF;
    IF LENGTH(lock_owner) NOT BETWEEN 1 AND 255 THEN
        SET msg = CONCAT('sqllock: invalid owner: ', LENGTH(lock_owner), ' bytes, want 1 to 255');
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = msg;
    END IF;
    IF ttl_us <= 0 THEN
        SET msg = CONCAT('sqllock: invalid TTL ', ttl_us, ' microseconds: it must be positive');
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = msg;
    END IF;
END;

-- sqllock_ring wakes the processes waiting for lock_name after a release
-- freed it, as the Go library does (dialect/mysql/wake_ring.go): with
-- ticket, it counts a ring in the name's oldest live ticket and ends the
-- statement of the bell that holds the ticket's tag; else it counts a
-- ring in the name's registrations and ends the statements of their live
-- bells. Each count commits before its KILL QUERY (in autocommit); a count
-- rolled back by a deadlock is tried again, up to three times. A bell
-- gone (error 1094) or of another user, which the definer may not kill
-- without CONNECTION ADMIN (error 1095), is skipped. It is best effort, as
-- the library's: it fails silently, and a waiter it does not wake comes
-- back within its MaxBackoff.
CREATE PROCEDURE sqllock_ring(IN lock_name LONGBLOB, IN ticket BOOLEAN)
NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
COMMENT 'sqllock: wakes the waiters of a lock that a release freed'
BEGIN
    DECLARE tries INT DEFAULT 0;
    DECLARE deadlocked, done BOOLEAN DEFAULT TRUE;
    DECLARE conn_id BIGINT UNSIGNED;
    DECLARE bells CURSOR FOR SELECT bell FROM sqllock_waiters WHERE name = lock_name AND IS_USED_LOCK(CONCAT('sqllock bell ', tag)) = bell;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN END;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
    DECLARE CONTINUE HANDLER FOR 1094, 1095 BEGIN END;
    WHILE deadlocked AND tries < 3 DO
        SET deadlocked = FALSE, tries = tries + 1;
        BEGIN
            DECLARE CONTINUE HANDLER FOR 1213 SET deadlocked = TRUE;
            IF ticket THEN
                UPDATE sqllock_tickets SET rung = rung + 1
                WHERE name = lock_name AND expires_at > (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND) ORDER BY id LIMIT 1;
            ELSE
                UPDATE sqllock_waiters SET rung = rung + 1 WHERE name = lock_name;
            END IF;
        END;
    END WHILE;
    IF NOT deadlocked THEN
        IF ticket THEN
            SELECT IS_USED_LOCK(CONCAT('sqllock bell ', waker)) INTO conn_id FROM sqllock_tickets
            WHERE name = lock_name AND expires_at > (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND) ORDER BY id LIMIT 1;
            IF conn_id IS NOT NULL THEN
                KILL QUERY conn_id;
            END IF;
        ELSE
            SET done = FALSE;
            OPEN bells;
            bell_loop: LOOP
                FETCH bells INTO conn_id;
                IF done THEN
                    LEAVE bell_loop;
                END IF;
                KILL QUERY conn_id;
            END LOOP;
            CLOSE bells;
        END IF;
    END IF;
END;

-- sqllock_try_acquire takes the lock lock_name for lock_owner for ttl_us
-- microseconds, or enters it once more if lock_owner holds it, and answers
-- the lease's fencing token (column token); NULL if another owner holds
-- it. It is the Go library's Acquire: the insert above the token floor,
-- or the takeover of an expired row, whose token is the larger of the
-- previous token plus one and the grant's time in microseconds
-- (dialect/mysql/epoch.go), carried back by LAST_INSERT_ID.
CREATE PROCEDURE sqllock_try_acquire(IN lock_name LONGBLOB, IN lock_owner LONGBLOB, IN ttl_us BIGINT)
NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
COMMENT 'sqllock: takes or re-enters a lock; answers its token, or NULL'
BEGIN
    IF ttl_us IS NULL THEN
        SIGNAL SQLSTATE '22004' SET MESSAGE_TEXT = 'sqllock: the TTL must not be NULL';
    END IF;
    CALL sqllock_check_lease(lock_name, lock_owner, ttl_us);
    DO LAST_INSERT_ID(0);
    INSERT INTO sqllock_locks (name, owner, token, holds, acquired_at, expires_at)
    SELECT lock_name, lock_owner, LAST_INSERT_ID(GREATEST(f.token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)))), 1, (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND), (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND) + INTERVAL ttl_us MICROSECOND
    FROM sqllock_token_floor f WHERE f.id = 1 LOCK IN SHARE MODE
    ON DUPLICATE KEY UPDATE
      token       = IF(sqllock_locks.expires_at <= VALUES(acquired_at), LAST_INSERT_ID(GREATEST(sqllock_locks.token + 1, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', VALUES(acquired_at)))),
                      IF(sqllock_locks.owner = lock_owner AND sqllock_locks.holds > 0, LAST_INSERT_ID(sqllock_locks.token), sqllock_locks.token + LAST_INSERT_ID(0))),
      holds       = IF(sqllock_locks.expires_at <= VALUES(acquired_at), 1, IF(sqllock_locks.owner = lock_owner AND sqllock_locks.holds > 0, sqllock_locks.holds + 1, sqllock_locks.holds)),
      owner       = IF(sqllock_locks.expires_at <= VALUES(acquired_at), lock_owner, sqllock_locks.owner),
      acquired_at = IF(sqllock_locks.expires_at <= VALUES(acquired_at), VALUES(acquired_at), sqllock_locks.acquired_at),
      expires_at  = IF(sqllock_locks.owner = lock_owner AND sqllock_locks.holds > 0, VALUES(expires_at), sqllock_locks.expires_at);
    SELECT CAST(NULLIF(LAST_INSERT_ID(), 0) AS SIGNED) AS token;
END;

-- sqllock_renew extends the live lease (lock_name, lock_owner,
-- lease_token) to ttl_us microseconds from now, and answers whether it
-- did (column renewed, 1 or 0): 0 when the lease expired, was released or
-- was taken over. The library's renewal of a batch of one: every renewal
-- changes the row, so the rows it changed are the leases it renewed.
CREATE PROCEDURE sqllock_renew(IN lock_name LONGBLOB, IN lock_owner LONGBLOB, IN lease_token BIGINT, IN ttl_us BIGINT)
NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
COMMENT 'sqllock: extends a live lease; answers 1, or 0 if it was lost'
BEGIN
    IF lease_token IS NULL OR ttl_us IS NULL THEN
        SIGNAL SQLSTATE '22004' SET MESSAGE_TEXT = 'sqllock: the token and the TTL must not be NULL';
    END IF;
    CALL sqllock_check_lease(lock_name, lock_owner, ttl_us);
    UPDATE sqllock_locks SET expires_at = GREATEST(expires_at + INTERVAL 1 MICROSECOND, (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND) + INTERVAL ttl_us MICROSECOND)
    WHERE name IN (lock_name) AND (name, owner, token) IN ((lock_name, lock_owner, lease_token)) AND holds > 0 AND expires_at > (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND);
    SELECT ROW_COUNT() > 0 AS renewed;
END;

-- sqllock_release gives back one hold of the lease (lock_name, lock_owner,
-- lease_token) and answers whether there was one (column released, 1 or
-- 0). The last release frees the lock and, if someone waits for it, wakes
-- the waiters as the library's release does (sqllock_ring): the oldest
-- live ticket's process, then the processes registered for the name.
CREATE PROCEDURE sqllock_release(IN lock_name LONGBLOB, IN lock_owner LONGBLOB, IN lease_token BIGINT)
NOT DETERMINISTIC MODIFIES SQL DATA SQL SECURITY DEFINER
COMMENT 'sqllock: gives back one hold of a lease; answers 1, or 0 if none'
BEGIN
    DECLARE freed BIGINT UNSIGNED;
    IF lease_token IS NULL THEN
        SIGNAL SQLSTATE '22004' SET MESSAGE_TEXT = 'sqllock: the token must not be NULL';
    END IF;
    CALL sqllock_check_lease(lock_name, lock_owner, NULL);
    DO LAST_INSERT_ID(0);
    UPDATE sqllock_locks SET holds = holds - 1, expires_at = IF(holds > 0, expires_at,
        IF(acquired_at + INTERVAL 0 MICROSECOND > (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND), acquired_at + INTERVAL 0 MICROSECOND, '1000-01-01 00:00:00')),
      token = token + 0 * LAST_INSERT_ID(IF(holds = 0 AND expires_at = '1000-01-01 00:00:00', 1 + waiters + 2 * ticketed, 1))
    WHERE name = lock_name AND owner = lock_owner AND token = lease_token AND holds > 0;
    SET freed = LAST_INSERT_ID();
    IF freed IN (3, 4) THEN
        CALL sqllock_ring(lock_name, TRUE);
    END IF;
    IF freed IN (2, 4) THEN
        CALL sqllock_ring(lock_name, FALSE);
    END IF;
    SELECT freed > 0 AS released;
END;

-- sqllock_guard checks, inside the caller's transaction, that the lease
-- (lock_name, lock_owner, lease_token) is live now, and locks its row
-- (LOCK IN SHARE MODE) until the transaction ends, so that no takeover
-- commits before it. It answers nothing, or fails with SQLSTATE SQLK2;
-- MySQL does not abort a transaction on an error: the caller rolls it
-- back.
CREATE PROCEDURE sqllock_guard(IN lock_name LONGBLOB, IN lock_owner LONGBLOB, IN lease_token BIGINT)
NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
COMMENT 'sqllock: fences the caller''s transaction; fails with SQLK2 unless the lease is current'
BEGIN
    DECLARE live INT DEFAULT 0;
    DECLARE msg VARCHAR(128);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET live = 0;
    IF lease_token IS NULL THEN
        SIGNAL SQLSTATE '22004' SET MESSAGE_TEXT = 'sqllock: the token must not be NULL';
    END IF;
    CALL sqllock_check_lease(lock_name, lock_owner, NULL);
    SELECT 1 INTO live FROM sqllock_locks
    WHERE name = lock_name AND owner = lock_owner AND token = lease_token AND holds > 0 AND expires_at > (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND)
    LOCK IN SHARE MODE;
    IF live = 0 THEN
        SET msg = CONCAT('sqllock: lease ', lease_token, ' is not current');
        SIGNAL SQLSTATE 'SQLK2' SET MESSAGE_TEXT = msg;
    END IF;
END;

-- sqllock_remaining answers how long the lease of lock_name has left, in
-- microseconds (column remaining_us): NULL when the name has no row, 0
-- when it is free. It is the library's waiter's statement. MySQL has no
-- NOTIFY: a SQL caller cannot be woken, and sleeps at most this long
-- between attempts, less a capped backoff (docs/protocol.md).
CREATE PROCEDURE sqllock_remaining(IN lock_name LONGBLOB)
NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
COMMENT 'sqllock: answers the microseconds left of a lock''s lease'
BEGIN
    CALL sqllock_check_lease(lock_name, 'x', NULL);
    SELECT (SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, (UTC_TIMESTAMP(6) + INTERVAL TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)) MICROSECOND), expires_at), 0) FROM sqllock_locks WHERE name = lock_name) AS remaining_us;
END;
