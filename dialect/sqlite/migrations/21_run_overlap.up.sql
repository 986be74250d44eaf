-- sqllock run ledger, overlap across occurrences (package ledger), SQLite.
-- An attempt is also 'skipped' (its occurrence came due while another
-- occurrence of its job ran, under the overlap policy skip) or 'replaced'
-- (it was running when a later occurrence of its job replaced it, under
-- the overlap policy replace). Both decide their occurrence.
--
-- SQLite cannot change a CHECK constraint: the table is rebuilt with the
-- new one (in the migration's transaction, as every SQLite migration
-- runs), its rows copied, and its index made again.
CREATE TABLE sqllock_runs_new (
    job         TEXT    NOT NULL,
    occurrence  TEXT    NOT NULL,
    attempt     INTEGER NOT NULL CHECK (attempt > 0),
    state       TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'abandoned', 'skipped', 'replaced')),
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    error       TEXT,
    PRIMARY KEY (job, occurrence, attempt)
) STRICT, WITHOUT ROWID;
INSERT INTO sqllock_runs_new (job, occurrence, attempt, state, owner, token, started_at, finished_at, error)
    SELECT job, occurrence, attempt, state, owner, token, started_at, finished_at, error FROM sqllock_runs;
DROP TABLE sqllock_runs;
ALTER TABLE sqllock_runs_new RENAME TO sqllock_runs;
CREATE INDEX IF NOT EXISTS sqllock_runs_started_at_idx ON sqllock_runs (started_at);
