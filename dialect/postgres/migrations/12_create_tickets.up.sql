-- sqllock FIFO tickets (Options.Fair), PostgreSQL.
-- A fair waiter takes a ticket: a row whose id orders it in its lock's
-- queue. The lock is granted only to the oldest live ticket (or, with no
-- live ticket, to anyone); the grant deletes the ticket in the same
-- statement. A ticket lives while its waiter renews it: a crashed waiter's
-- ticket expires and is skipped. waker is the NOTIFY channel of the
-- waiter's process, on which the release that frees the lock wakes it.
-- The identity's default cache of 1 keeps ids in the order they are drawn.
CREATE TABLE IF NOT EXISTS sqllock_tickets (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    owner      text        NOT NULL,
    waker      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS sqllock_tickets_name_idx ON sqllock_tickets (name, id);
CREATE INDEX IF NOT EXISTS sqllock_tickets_expires_at_idx ON sqllock_tickets (expires_at);
