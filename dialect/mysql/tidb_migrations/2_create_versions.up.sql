-- sqllock optimistic (version-column) locks, TiDB (the files run on MySQL 8 / MariaDB 10.6+ too).
-- One row per lock name, created on first use and never deleted: version is
-- the fencing token and must only grow. A free row has holds = 0 and
-- expires_at in the past; owner keeps the last holder, for operators.
CREATE TABLE sqllock_versions (
    name        VARBINARY(255) NOT NULL PRIMARY KEY,
    owner       VARBINARY(255) NOT NULL,
    version     BIGINT         NOT NULL,
    holds       INT            NOT NULL,
    acquired_at DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL
) ENGINE = InnoDB;
