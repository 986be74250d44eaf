-- sqllock lock table, TiDB (the files run on MySQL 8 / MariaDB 10.6+ too).
-- Names and owners are VARBINARY so that they compare byte for byte, as on
-- PostgreSQL (no case folding, no trailing-space padding). Times are UTC.
-- A released lock keeps its row (holds = 0, expires_at in the past) until the
-- reaper deletes it.
CREATE TABLE sqllock_locks (
    name        VARBINARY(255) NOT NULL PRIMARY KEY,
    owner       VARBINARY(255) NOT NULL,
    token       BIGINT         NOT NULL,
    holds       INT            NOT NULL,
    acquired_at DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    KEY sqllock_locks_expires_at_idx (expires_at)
) ENGINE = InnoDB;

-- The largest token the reaper ever deleted. A new row starts above it, which
-- keeps tokens growing per name across reaping.
CREATE TABLE sqllock_token_floor (
    id    TINYINT NOT NULL PRIMARY KEY,
    token BIGINT  NOT NULL
) ENGINE = InnoDB;

INSERT INTO sqllock_token_floor (id, token) VALUES (1, 0);
