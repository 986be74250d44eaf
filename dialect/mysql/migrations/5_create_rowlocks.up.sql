-- sqllock pessimistic (row-lock) locks, MySQL 8 / MariaDB 10.6+.
-- One row per lock name, created on first use and never deleted. A lock is
-- the row lock (FOR UPDATE / share mode) of an open transaction: nothing in
-- the row changes while it is held, and it ends with the transaction or its
-- connection.
CREATE TABLE IF NOT EXISTS sqllock_rowlocks (
    name VARBINARY(255) NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

-- Fencing tokens: the holder inserts a row once its lock is granted and
-- takes the AUTO_INCREMENT id. InnoDB never hands an id out twice, even when
-- the inserting transaction rolls back (the counter survives restarts on
-- MySQL 8 and MariaDB 10.2.4+). The rows themselves are not needed: the
-- Reaper deletes committed ones, keeping the newest.
CREATE TABLE IF NOT EXISTS sqllock_rowlock_tokens (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY
) ENGINE = InnoDB;
