-- sqllock FIFO tickets (Options.Fair), SQLite.
-- A fair waiter takes a ticket: a row whose id orders it in its lock's
-- queue (AUTOINCREMENT: ids are never reused). The lock is granted only to
-- the oldest live ticket (or, with no live ticket, to anyone), in a
-- transaction that deletes the ticket. A ticket lives while its waiter
-- renews it: a crashed waiter's ticket expires and is skipped. Times are
-- integer microseconds since the Unix epoch.
CREATE TABLE IF NOT EXISTS sqllock_tickets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS sqllock_tickets_name_idx ON sqllock_tickets (name, id);
CREATE INDEX IF NOT EXISTS sqllock_tickets_expires_at_idx ON sqllock_tickets (expires_at);
