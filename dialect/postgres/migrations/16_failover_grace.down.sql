DROP FUNCTION IF EXISTS sqllock_grant_epoch(bigint);
DROP TABLE IF EXISTS sqllock_grace;
DROP SEQUENCE IF EXISTS sqllock_timeline_seen;
