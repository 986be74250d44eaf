-- sqllock run ledger, PostgreSQL (package ledger).
-- One row per attempt of an occurrence of a job. Every write is made in a
-- transaction guarded by the attempt's lease on the lock table, so an
-- attempt whose lease ended records nothing.
CREATE TABLE IF NOT EXISTS sqllock_runs (
    job         text        NOT NULL,
    occurrence  text        NOT NULL,
    attempt     integer     NOT NULL CHECK (attempt > 0),
    state       text        NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'abandoned')),
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    error       text,
    PRIMARY KEY (job, occurrence, attempt)
);

CREATE INDEX IF NOT EXISTS sqllock_runs_started_at_idx ON sqllock_runs (started_at);

-- One row per job: its period (NULL for a job whose occurrences the caller
-- names), from which the occurrences it should have are known since
-- first_seen (which the ledger's reap moves on).
CREATE TABLE IF NOT EXISTS sqllock_run_jobs (
    job        text        NOT NULL PRIMARY KEY,
    period_us  bigint,
    phase_us   bigint      NOT NULL,
    grace_us   bigint      NOT NULL,
    first_seen timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL
);
