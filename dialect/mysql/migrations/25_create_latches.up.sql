-- sqllock countdown latches (sqllock.NewLatch), MySQL 8 / MariaDB 10.6+.
-- One row per latch name: the count it was created with and the count
-- left, never below 0. A latch lives until it is deleted.
CREATE TABLE IF NOT EXISTS sqllock_latches (
    name          VARBINARY(255) NOT NULL PRIMARY KEY,
    initial_count BIGINT         NOT NULL,
    remaining     BIGINT         NOT NULL
) ENGINE = InnoDB;
