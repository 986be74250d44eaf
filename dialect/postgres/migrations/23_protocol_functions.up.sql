-- sqllock's lock protocol as SQL functions, PostgreSQL (docs/protocol.md):
-- a client in any language takes, renews, releases and guards the locks of
-- sqllock_locks through them, excluding Go's sqllock.Table on the same
-- names. Each function runs the statement of the Go library's lock table
-- (dialect/postgres/sql.go) with the same rows, tokens and database-clock
-- expiry; TTLs are intervals.
--
-- They are SECURITY DEFINER, so a role with USAGE on the schema and
-- EXECUTE on them (and no privilege on the tables) can lock; PUBLIC's
-- EXECUTE is revoked. Their search_path is fixed below to this schema,
-- then pg_temp, so that no caller's temporary table shadows sqllock's.
--
-- Bad input changes nothing and fails with SQLSTATE 22004 (a NULL
-- argument) or 22023 (an empty name or owner, one longer than 255 bytes, a
-- TTL of zero or less).

-- sqllock_check_lease checks a name, an owner and a TTL, and returns the
-- TTL in microseconds.
CREATE OR REPLACE FUNCTION sqllock_check_lease(lock_name text, lock_owner text, ttl interval) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    us bigint;
BEGIN
    IF lock_name IS NULL OR lock_owner IS NULL THEN
        RAISE EXCEPTION 'sqllock: the lock name and the owner must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF octet_length(lock_name) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'sqllock: invalid lock name: % bytes, want 1 to 255', octet_length(lock_name) USING ERRCODE = '22023';
    END IF;
    IF octet_length(lock_owner) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'sqllock: invalid owner: % bytes, want 1 to 255', octet_length(lock_owner) USING ERRCODE = '22023';
    END IF;
    IF ttl IS NULL THEN
        RETURN NULL;
    END IF;
    us := (extract(epoch FROM ttl) * 1000000)::bigint;
    IF us <= 0 THEN
        RAISE EXCEPTION 'sqllock: invalid TTL %: it must be positive', ttl USING ERRCODE = '22023';
    END IF;
    RETURN us;
END
$$;

-- sqllock_try_acquire takes the lock lock_name for lock_owner for ttl, or
-- enters it once more if lock_owner holds it, and returns the lease's
-- fencing token; NULL if another owner holds it. It is the Go library's
-- Acquire: the name's fence, then the insert or the takeover of an expired
-- row, whose token is drawn after the row lock. During the failover grace
-- it fails with SQLSTATE SQLK1 (DETAIL: the microseconds left).
CREATE OR REPLACE FUNCTION sqllock_try_acquire(lock_name text, lock_owner text, ttl interval) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    us  bigint;
    tok bigint;
BEGIN
    IF ttl IS NULL THEN
        RAISE EXCEPTION 'sqllock: the TTL must not be NULL' USING ERRCODE = '22004';
    END IF;
    us := sqllock_check_lease(lock_name, lock_owner, ttl);
    INSERT INTO sqllock_locks AS l (name, owner, token, holds, acquired_at, expires_at)
    SELECT lock_name, lock_owner, fence.epoch + nextval('sqllock_token_seq'), 1, now(), now() + us * interval '1 microsecond'
    FROM (SELECT pg_advisory_xact_lock_shared(1936813163, hashtext(lock_name)), sqllock_grant_epoch(us) AS epoch) AS fence
    ON CONFLICT (name) DO UPDATE SET
      token       = CASE WHEN l.expires_at <= now() THEN ((EXCLUDED.token >> 44) << 44) + nextval('sqllock_token_seq') ELSE l.token END,
      holds       = CASE WHEN l.expires_at <= now() THEN 1 ELSE l.holds + 1 END,
      acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END,
      owner       = EXCLUDED.owner,
      expires_at  = EXCLUDED.expires_at
    WHERE l.expires_at <= now() OR (l.owner = EXCLUDED.owner AND l.holds > 0 AND ((l.token >> 44) << 44) IN (0, ((EXCLUDED.token >> 44) << 44)))
    RETURNING l.token INTO tok;
    RETURN tok;
END
$$;

-- sqllock_renew extends the live lease (lock_name, lock_owner, token) to
-- ttl from now, and reports whether it did: false when the lease expired,
-- was released or taken over, or was granted on an earlier timeline.
CREATE OR REPLACE FUNCTION sqllock_renew(lock_name text, lock_owner text, token bigint, ttl interval) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
#variable_conflict use_variable
DECLARE
    us bigint;
BEGIN
    IF ttl IS NULL OR token IS NULL THEN
        RAISE EXCEPTION 'sqllock: the token and the TTL must not be NULL' USING ERRCODE = '22004';
    END IF;
    us := sqllock_check_lease(lock_name, lock_owner, ttl);
    UPDATE sqllock_locks l SET expires_at = now() + us * interval '1 microsecond'
    WHERE l.name = lock_name AND l.owner = lock_owner AND l.token = token AND l.holds > 0 AND l.expires_at > now()
      AND l.token >> 44 IN (0, ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint);
    RETURN FOUND;
END
$$;

-- sqllock_release gives back one hold of the lease (lock_name, lock_owner,
-- token) and reports whether there was one. The last release frees the
-- lock and, if someone waited for it, announces the name with NOTIFY on
-- the channels Go's waiters listen on ("sqllock", for a dialect without a
-- schema, and "sqllock:" followed by the schema), and wakes the oldest
-- FIFO ticket's process.
CREATE OR REPLACE FUNCTION sqllock_release(lock_name text, lock_owner text, token bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
#variable_conflict use_variable
DECLARE
    free     boolean;
    waiters  boolean;
    ticketed boolean;
BEGIN
    IF token IS NULL THEN
        RAISE EXCEPTION 'sqllock: the token must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM sqllock_check_lease(lock_name, lock_owner, NULL);
    UPDATE sqllock_locks l SET holds = l.holds - 1, expires_at = CASE WHEN l.holds > 1 THEN l.expires_at
        WHEN l.acquired_at > now() THEN l.acquired_at
        ELSE '-infinity' END
    WHERE l.name = lock_name AND l.owner = lock_owner AND l.token = token AND l.holds > 0
    RETURNING l.holds = 0 AND l.expires_at <= now(), l.waiters, l.ticketed INTO free, waiters, ticketed;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF free AND waiters THEN
        PERFORM pg_notify('sqllock', lock_name);
        PERFORM pg_notify(left('sqllock:' || current_schema(), 63), lock_name);
    END IF;
    IF free AND ticketed THEN
        PERFORM pg_notify(t.waker, chr(1) || 'sqllock-ticket:' || t.id) FROM (
          SELECT t.waker, t.id FROM sqllock_tickets t WHERE t.name = lock_name AND t.expires_at > now() ORDER BY t.id LIMIT 1) t;
    END IF;
    RETURN true;
END
$$;

-- sqllock_guard checks, inside the caller's transaction, that the lease
-- (lock_name, lock_owner, token) is live now (by clock_timestamp()) and of
-- the current timeline, and locks its row FOR SHARE until the transaction
-- ends, so that no takeover commits before it. It returns true, or fails
-- with SQLSTATE SQLK2, which aborts the caller's transaction.
CREATE OR REPLACE FUNCTION sqllock_guard(lock_name text, lock_owner text, token bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
#variable_conflict use_variable
BEGIN
    IF token IS NULL THEN
        RAISE EXCEPTION 'sqllock: the token must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM sqllock_check_lease(lock_name, lock_owner, NULL);
    PERFORM 1 FROM sqllock_locks l
    WHERE l.name = lock_name AND l.owner = lock_owner AND l.token = token AND l.holds > 0 AND l.expires_at > clock_timestamp()
      AND l.token >> 44 IN (0, ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint)
    FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'sqllock: lease % of lock % is not current', token, lock_name USING ERRCODE = 'SQLK2';
    END IF;
    RETURN true;
END
$$;

-- sqllock_remaining returns how long the lease of lock_name has left: NULL
-- when the name has no row, zero when it is free or when a release
-- committed just now (look again at once). It is the waiter's statement
-- of the Go library: it marks the row as waited for, so that its release
-- announces the name (see sqllock_release).
CREATE OR REPLACE FUNCTION sqllock_remaining(lock_name text) RETURNS interval
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    us bigint;
BEGIN
    PERFORM sqllock_check_lease(lock_name, 'x', NULL);
    WITH hint AS (
      UPDATE sqllock_locks SET waiters = true WHERE name = lock_name AND NOT waiters AND expires_at > now()
      RETURNING 1
    )
    SELECT CASE WHEN l.expires_at > now() AND NOT l.waiters AND NOT EXISTS (SELECT 1 FROM hint) THEN 0
      ELSE (extract(epoch FROM greatest(l.expires_at, now()) - now()) * 1000000)::bigint END
    INTO us FROM sqllock_locks l WHERE l.name = lock_name;
    RETURN us * interval '1 microsecond';
END
$$;

DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'sqllock_check_lease(text, text, interval)',
        'sqllock_try_acquire(text, text, interval)',
        'sqllock_renew(text, text, bigint, interval)',
        'sqllock_release(text, text, bigint)',
        'sqllock_guard(text, text, bigint)',
        'sqllock_remaining(text)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
