-- The states of version 21 go: a replaced attempt becomes abandoned (its
-- lease was ended), a skipped one (which never ran) is deleted; then the
-- table is rebuilt with the CHECK of version 15.
DELETE FROM sqllock_runs WHERE state = 'skipped';
UPDATE sqllock_runs SET state = 'abandoned' WHERE state = 'replaced';
CREATE TABLE sqllock_runs_new (
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
INSERT INTO sqllock_runs_new (job, occurrence, attempt, state, owner, token, started_at, finished_at, error)
    SELECT job, occurrence, attempt, state, owner, token, started_at, finished_at, error FROM sqllock_runs;
DROP TABLE sqllock_runs;
ALTER TABLE sqllock_runs_new RENAME TO sqllock_runs;
CREATE INDEX IF NOT EXISTS sqllock_runs_started_at_idx ON sqllock_runs (started_at);
