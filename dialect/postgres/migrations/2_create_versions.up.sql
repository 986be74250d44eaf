-- sqllock optimistic (version-column) locks, PostgreSQL.
-- One row per lock name, created on first use and never deleted: version is
-- the fencing token and must only grow. A free row has holds = 0 and
-- expires_at = -infinity; owner keeps the last holder, for operators.
CREATE TABLE IF NOT EXISTS sqllock_versions (
    name        text        NOT NULL PRIMARY KEY,
    owner       text        NOT NULL,
    version     bigint      NOT NULL CHECK (version > 0),
    holds       integer     NOT NULL CHECK (holds >= 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
