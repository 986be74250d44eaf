-- sqllock FIFO tickets of semaphores (Options.Fair on a Semaphore), SQLite.
-- A fair waiter for a semaphore takes a ticket: a row whose id orders it in
-- its semaphore's queue (AUTOINCREMENT: ids are never reused). A name's
-- permits go to its live tickets in ticket order; the grant deletes the
-- ticket in its transaction. A ticket lives while its waiter renews it: a
-- crashed waiter's ticket expires and is skipped. Times are integer
-- microseconds since the Unix epoch.
CREATE TABLE IF NOT EXISTS sqllock_semaphore_tickets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS sqllock_semaphore_tickets_name_idx ON sqllock_semaphore_tickets (name, id);
CREATE INDEX IF NOT EXISTS sqllock_semaphore_tickets_expires_at_idx ON sqllock_semaphore_tickets (expires_at);
