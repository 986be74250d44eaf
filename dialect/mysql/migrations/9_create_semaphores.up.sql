-- sqllock semaphores, MySQL 8 / MariaDB 10.6+.
-- One head row per semaphore name: the limit its holders were granted under
-- and the name's last token. Acquires lock the head row, which serialises
-- the grants of a name. Head rows are never deleted, so a name's tokens
-- keep growing across reaping.
CREATE TABLE IF NOT EXISTS sqllock_semaphores (
    name  VARBINARY(255) NOT NULL PRIMARY KEY,
    lim   INT            NOT NULL,
    token BIGINT         NOT NULL
) ENGINE = InnoDB;

-- One row per holder: a lease like a row of the lock table. Times are UTC.
CREATE TABLE IF NOT EXISTS sqllock_semaphore_holders (
    name        VARBINARY(255) NOT NULL,
    owner       VARBINARY(255) NOT NULL,
    token       BIGINT         NOT NULL,
    holds       INT            NOT NULL,
    acquired_at DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (name, owner),
    KEY sqllock_semaphore_holders_expires_at_idx (expires_at)
) ENGINE = InnoDB;
