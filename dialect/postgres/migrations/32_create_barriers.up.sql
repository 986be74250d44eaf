-- sqllock double barriers (package barrier), PostgreSQL.
-- One head row per barrier name: the size of its rounds and whether the
-- current round is full (all its members entered). Head rows are never
-- deleted: the next round reuses the row.
CREATE TABLE IF NOT EXISTS sqllock_barriers (
    name   text    NOT NULL PRIMARY KEY,
    size   integer NOT NULL CHECK (size >= 1),
    filled boolean NOT NULL
);

-- One row per member of a round: a lease, renewed while the member is
-- inside, and whether it is leaving. A member's row goes when it has left
-- (or gave up entering); an expired row stays until a later Enter of the
-- name deletes it, so that every member still leaving sees it.
CREATE TABLE IF NOT EXISTS sqllock_barrier_members (
    name       text        NOT NULL,
    owner      text        NOT NULL,
    leaving    boolean     NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (name, owner)
);
