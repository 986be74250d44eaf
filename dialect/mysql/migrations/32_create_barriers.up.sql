-- sqllock double barriers (package barrier), MySQL 8 / MariaDB 10.6+.
-- One head row per barrier name: the size of its rounds and whether the
-- current round is full (all its members entered). Head rows are never
-- deleted: the next round reuses the row. Every entry counts itself in
-- entries, a write of the head row: on Galera, entries through different
-- nodes then conflict at certification.
CREATE TABLE IF NOT EXISTS sqllock_barriers (
    name    VARBINARY(255) NOT NULL PRIMARY KEY,
    size    INT            NOT NULL,
    filled  BOOLEAN        NOT NULL,
    entries BIGINT         NOT NULL DEFAULT 0
) ENGINE = InnoDB;

-- One row per member of a round: a lease, renewed while the member is
-- inside, and whether it is leaving. A member's row goes when it has left
-- (or gave up entering); an expired row stays until a later Enter of the
-- name deletes it, so that every member still leaving sees it.
CREATE TABLE IF NOT EXISTS sqllock_barrier_members (
    name       VARBINARY(255) NOT NULL,
    owner      VARBINARY(255) NOT NULL,
    leaving    BOOLEAN        NOT NULL,
    expires_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (name, owner)
) ENGINE = InnoDB;
