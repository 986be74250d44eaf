-- sqllock run ledger, MySQL 8 / MariaDB 10.6+ (package ledger).
-- One row per attempt of an occurrence of a job. Every write is made in a
-- transaction guarded by the attempt's lease on the lock table, so an
-- attempt whose lease ended records nothing. Times are UTC.
CREATE TABLE IF NOT EXISTS sqllock_runs (
    job         VARBINARY(255) NOT NULL,
    occurrence  VARBINARY(255) NOT NULL,
    attempt     INT            NOT NULL,
    state       VARCHAR(16)    NOT NULL,
    owner       VARBINARY(255) NOT NULL,
    token       BIGINT         NOT NULL,
    started_at  DATETIME(6)    NOT NULL,
    finished_at DATETIME(6)    NULL,
    error       TEXT           NULL,
    PRIMARY KEY (job, occurrence, attempt),
    KEY sqllock_runs_started_at_idx (started_at)
) ENGINE = InnoDB;

-- One row per job: its period (NULL for a job whose occurrences the caller
-- names), from which the occurrences it should have are known since
-- first_seen (which the ledger's reap moves on).
CREATE TABLE IF NOT EXISTS sqllock_run_jobs (
    job        VARBINARY(255) NOT NULL PRIMARY KEY,
    period_us  BIGINT         NULL,
    phase_us   BIGINT         NOT NULL,
    grace_us   BIGINT         NOT NULL,
    first_seen DATETIME(6)    NOT NULL,
    last_seen  DATETIME(6)    NOT NULL
) ENGINE = InnoDB;
