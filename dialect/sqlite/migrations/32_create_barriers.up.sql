-- sqllock double barriers (package barrier), SQLite.
-- One head row per barrier name: the size of its rounds and whether the
-- current round is full (all its members entered). Head rows are never
-- deleted: the next round reuses the row.
CREATE TABLE IF NOT EXISTS sqllock_barriers (
    name   TEXT    NOT NULL PRIMARY KEY,
    size   INTEGER NOT NULL CHECK (size >= 1),
    filled INTEGER NOT NULL
);

-- One row per member of a round: a lease (expires_at in microseconds since
-- the Unix epoch), renewed while the member is inside, and whether it is
-- leaving. A member's row goes when it has left (or gave up entering); an
-- expired row stays until a later Enter of the name deletes it, so that
-- every member still leaving sees it.
CREATE TABLE IF NOT EXISTS sqllock_barrier_members (
    name       TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    leaving    INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (name, owner)
);
