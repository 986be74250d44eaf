-- sqllock countdown latches (sqllock.NewLatch), SQLite.
-- One row per latch name: the count it was created with and the count
-- left, never below 0. A latch lives until it is deleted.
CREATE TABLE IF NOT EXISTS sqllock_latches (
    name          TEXT    NOT NULL PRIMARY KEY,
    initial_count INTEGER NOT NULL CHECK (initial_count >= 1),
    remaining     INTEGER NOT NULL CHECK (remaining >= 0)
);
