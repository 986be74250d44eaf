-- sqllock FIFO tickets of semaphores (Options.Fair on a Semaphore), PostgreSQL.
-- A fair waiter for a semaphore takes a ticket: a row whose id orders it in
-- its semaphore's queue. A name's permits go to its live tickets in ticket
-- order; the grant deletes the ticket in its transaction. A ticket lives
-- while its waiter renews it: a crashed waiter's ticket expires and is
-- skipped. waker is the NOTIFY channel of the waiter's process. Ids are
-- drawn from the lock tickets' identity (the statements name it), so that
-- a process told to wake ticket N never mistakes one queue's N for the
-- other's.
CREATE TABLE IF NOT EXISTS sqllock_semaphore_tickets (
    id         bigint      NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    owner      text        NOT NULL,
    waker      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS sqllock_semaphore_tickets_name_idx ON sqllock_semaphore_tickets (name, id);
CREATE INDEX IF NOT EXISTS sqllock_semaphore_tickets_expires_at_idx ON sqllock_semaphore_tickets (expires_at);
