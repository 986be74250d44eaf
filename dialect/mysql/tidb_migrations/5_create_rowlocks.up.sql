-- sqllock pessimistic (row-lock) locks, TiDB (the files run on MySQL 8 / MariaDB 10.6+ too).
-- One row per lock name, created on first use and never deleted. A lock is
-- the row lock (FOR UPDATE / share mode) of an open transaction: nothing in
-- the row changes while it is held, and it ends with the transaction or its
-- connection.
CREATE TABLE sqllock_rowlocks (
    name VARBINARY(255) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

-- Fencing tokens: the holder inserts a row once its lock is granted and
-- takes the AUTO_INCREMENT id, which is never handed out twice, even when
-- the inserting transaction rolls back. Each TiDB server takes ids from a
-- range it cached, so ids from several servers are not in the order they
-- were taken unless the table has AUTO_ID_CACHE 1: then every id comes from
-- one allocator, in order (TiDB 6.4+; the comment is TiDB's own syntax,
-- which MySQL and MariaDB ignore). The rows themselves are not needed: the
-- Reaper deletes committed ones, keeping the newest.
CREATE TABLE sqllock_rowlock_tokens (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
