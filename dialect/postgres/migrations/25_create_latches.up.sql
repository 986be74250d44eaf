-- sqllock countdown latches (sqllock.NewLatch), PostgreSQL.
-- One row per latch name: the count it was created with and the count
-- left, never below 0. A latch lives until it is deleted.
CREATE TABLE IF NOT EXISTS sqllock_latches (
    name          text   NOT NULL PRIMARY KEY,
    initial_count bigint NOT NULL CHECK (initial_count >= 1),
    remaining     bigint NOT NULL CHECK (remaining >= 0)
);
