-- sqllock failover grace, PostgreSQL (Chubby's master fail-over rule).
-- After a promotion the new primary lacks the grants the old one made while
-- the standby lagged, and their holders may still trust them. So a server
-- grants no lease until the longest TTL ever granted has passed since it was
-- first seen granting on its timeline. Leases granted on the new timeline
-- are renewed as usual.
--
-- The timeline and the moment it was first seen are kept in a sequence,
-- because a sequence's value survives the rollback of the statement that
-- set it: the grant that finds a new timeline records it, then fails. The
-- value is timeline << 42 | milliseconds since the Unix epoch.
CREATE SEQUENCE IF NOT EXISTS sqllock_timeline_seen AS bigint MINVALUE 0 NO CYCLE;
-- The schema's own timeline counts as seen long ago: no grace on first use.
SELECT setval('sqllock_timeline_seen',
    (('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint << 42), true);

-- The longest TTL granted (microseconds), raised by grants, never lowered.
CREATE TABLE IF NOT EXISTS sqllock_grace (
    id      integer NOT NULL PRIMARY KEY CHECK (id = 1),
    max_ttl bigint  NOT NULL
);
INSERT INTO sqllock_grace (id, max_ttl) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- sqllock_grant_epoch returns the smallest token of the current timeline
-- (its ID in the bits above 44) for a grant of a lease of ttl microseconds,
-- or fails with SQLSTATE SQLK1 while grants wait out the grace after a
-- timeline change; the error's DETAIL is the wait left, in microseconds.
CREATE OR REPLACE FUNCTION sqllock_grant_epoch(ttl bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    tl   bigint := ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint;
    seen bigint;
    top  bigint;
    nowms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    left_us bigint;
BEGIN
    SELECT last_value INTO seen FROM sqllock_timeline_seen;
    IF seen >> 42 <> tl THEN
        seen := (tl << 42) | nowms;
        PERFORM setval('sqllock_timeline_seen', seen, true);
    END IF;
    SELECT max_ttl INTO top FROM sqllock_grace WHERE id = 1;
    left_us := ((seen & ((1::bigint << 42) - 1)) - nowms) * 1000 + coalesce(top, 0);
    IF left_us > 0 THEN
        RAISE EXCEPTION 'sqllock: no lease is granted until % ms after the promotion to timeline %: leases granted before it may still be trusted',
            coalesce(top, 0) / 1000, tl
            USING ERRCODE = 'SQLK1', DETAIL = left_us::text;
    END IF;
    IF ttl > coalesce(top, 0) THEN
        UPDATE sqllock_grace SET max_ttl = ttl WHERE id = 1 AND max_ttl < ttl;
    END IF;
    RETURN tl << 44;
END
$$;
