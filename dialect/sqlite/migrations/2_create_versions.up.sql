-- sqllock optimistic (version-column) locks, SQLite 3.42+.
-- One row per lock name, created on first use and never deleted: version is
-- the fencing token and must only grow. A free row has holds = 0 and
-- expires_at = 0; owner keeps the last holder, for operators. Times are
-- integer microseconds since the Unix epoch on the host's clock.
CREATE TABLE IF NOT EXISTS sqllock_versions (
    name        TEXT    NOT NULL PRIMARY KEY,
    owner       TEXT    NOT NULL,
    version     INTEGER NOT NULL CHECK (version > 0),
    holds       INTEGER NOT NULL CHECK (holds >= 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
