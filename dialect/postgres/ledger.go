package postgres

import (
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// ledgerSQL declares the run ledger's statements on the tables runs and
// jobs. They run inside the ledger's guarded transactions, so their time
// is clock_timestamp(), not the transaction's start.
func ledgerSQL(runs, jobs string) sqlrun.LedgerSQL {
	const (
		now = `clock_timestamp()`
		age = `clock_timestamp() - CAST(:age AS bigint) * interval '1 microsecond'`
	)
	columns := fmt.Sprintf(`job, occurrence, attempt, state, owner, token, %s, coalesce(%s, 0), coalesce(error, '')`,
		micros("started_at"), micros("finished_at"))
	return sqlrun.LedgerSQL{
		Now: sqlrun.Q(`SELECT ` + micros(now)),
		Attempts: sqlrun.Q(fmt.Sprintf(`SELECT %s, %s FROM %s WHERE job = :job AND occurrence = :occurrence ORDER BY attempt`,
			columns, micros(now), runs)),
		Abandon: sqlrun.X(fmt.Sprintf(`UPDATE %s SET state = 'abandoned', finished_at = %s
WHERE job = :job AND occurrence = :occurrence AND state = 'running'`, runs, now)),
		Insert: sqlrun.X(fmt.Sprintf(`INSERT INTO %s (job, occurrence, attempt, state, owner, token, started_at)
VALUES (:job, :occurrence, :attempt, 'running', :owner, :token, %s)`, runs, now)),
		Schedule: sqlrun.X(fmt.Sprintf(`INSERT INTO %s AS j (job, period_us, phase_us, grace_us, first_seen, last_seen)
VALUES (:job, NULLIF(CAST(:period AS bigint), 0), CAST(:phase AS bigint), CAST(:grace AS bigint), %[2]s, %[2]s)
ON CONFLICT (job) DO UPDATE SET
  first_seen = CASE WHEN j.period_us IS NOT DISTINCT FROM excluded.period_us AND j.phase_us = excluded.phase_us
    THEN j.first_seen ELSE excluded.first_seen END,
  period_us = excluded.period_us, phase_us = excluded.phase_us, grace_us = excluded.grace_us,
  last_seen = excluded.last_seen`, jobs, now)),
		Finish: sqlrun.X(fmt.Sprintf(`UPDATE %s SET state = :state, finished_at = %s, error = NULLIF(:error, '')
WHERE job = :job AND occurrence = :occurrence AND attempt = :attempt AND token = :token AND state = 'running'`, runs, now)),
		Runs: sqlrun.Q(fmt.Sprintf(`SELECT %s FROM %s WHERE (CAST(:job AS text) = '' OR job = :job)
ORDER BY started_at DESC, token DESC LIMIT :limit`, columns, runs)),
		Jobs: sqlrun.Q(fmt.Sprintf(`SELECT job, period_us, phase_us, grace_us, %s, %s FROM %s
WHERE period_us IS NOT NULL AND (CAST(:job AS text) = '' OR job = :job) ORDER BY job`,
			micros("first_seen"), micros("last_seen"), jobs)),
		Occurrences: sqlrun.Q(fmt.Sprintf(`SELECT DISTINCT occurrence FROM %s
WHERE job = :job AND occurrence >= :from AND occurrence <= :to ORDER BY occurrence`, runs)),
		Reap: sqlrun.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (job, occurrence, attempt) IN (
  SELECT job, occurrence, attempt FROM %[1]s
  WHERE started_at < %[2]s AND coalesce(finished_at, started_at) < %[2]s LIMIT :limit)`, runs, age)),
		ReapJobs: sqlrun.X(fmt.Sprintf(`UPDATE %[1]s SET first_seen = %[2]s WHERE first_seen < %[2]s`, jobs, age)),
	}
}

// ledgerTables compiles the run ledger's statements.
func (d *Dialect) ledgerTables(c *sqlrun.Compiler) *sqlrun.RunLedger {
	runs, jobs := "sqllock_runs", "sqllock_run_jobs"
	sqlrun.Qualify(d.schema, quote, &runs, &jobs)
	return sqlrun.NewRunLedger(d.run, c, ledgerSQL(runs, jobs))
}
