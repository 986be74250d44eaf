-- sqllock read/write locks, MySQL 8 / MariaDB 10.6+. Times are UTC.
-- One head row per name, created on first use and kept: it serialises the
-- grants of the name (each locks it first), counts the name's tokens, and
-- keeps a waiting writer's intent (which keeps new readers out until it
-- expires or is withdrawn).
CREATE TABLE IF NOT EXISTS sqllock_rwlock_heads (
    name              VARBINARY(255) NOT NULL PRIMARY KEY,
    token             BIGINT         NOT NULL DEFAULT 0,
    intent_owner      VARBINARY(255) NOT NULL DEFAULT '',
    intent_expires_at DATETIME(6)    NOT NULL DEFAULT '1000-01-01 00:00:00',
    waiters           BOOLEAN        NOT NULL DEFAULT FALSE
) ENGINE = InnoDB;

-- One row per holder (reader or writer) of a name: its lease.
CREATE TABLE IF NOT EXISTS sqllock_rwlock_holders (
    name        VARBINARY(255) NOT NULL,
    owner       VARBINARY(255) NOT NULL,
    shared      BOOLEAN        NOT NULL,
    token       BIGINT         NOT NULL,
    holds       INT            NOT NULL,
    acquired_at DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    PRIMARY KEY (name, owner),
    KEY sqllock_rwlock_holders_expires_at_idx (expires_at)
) ENGINE = InnoDB;
