-- sqllock run ledger, SQLite 3.42+ (package ledger).
-- One row per attempt of an occurrence of a job. Every write is made in a
-- transaction guarded by the attempt's lease on the lock table, so an
-- attempt whose lease ended records nothing. Times are integer
-- microseconds since the Unix epoch on the host's clock.
CREATE TABLE IF NOT EXISTS sqllock_runs (
    job         TEXT    NOT NULL,
    occurrence  TEXT    NOT NULL,
    attempt     INTEGER NOT NULL CHECK (attempt > 0),
    state       TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'abandoned')),
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    error       TEXT,
    PRIMARY KEY (job, occurrence, attempt)
) STRICT, WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS sqllock_runs_started_at_idx ON sqllock_runs (started_at);

-- One row per job: its period (NULL for a job whose occurrences the caller
-- names), from which the occurrences it should have are known since
-- first_seen (which the ledger's reap moves on).
CREATE TABLE IF NOT EXISTS sqllock_run_jobs (
    job        TEXT    NOT NULL PRIMARY KEY,
    period_us  INTEGER,
    phase_us   INTEGER NOT NULL,
    grace_us   INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL
) STRICT;
