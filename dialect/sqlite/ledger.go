package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// ledgerSQL declares the run ledger's statements.
func ledgerSQL() sqlrun.LedgerSQL {
	const (
		runs    = "sqllock_runs"
		jobs    = "sqllock_run_jobs"
		columns = `job, occurrence, attempt, state, owner, token, started_at, coalesce(finished_at, 0), coalesce(error, '')`
		age     = `(` + now + ` - :age)`
	)
	return sqlrun.LedgerSQL{
		Now: sqlrun.Q(`SELECT ` + now),
		Attempts: sqlrun.Q(fmt.Sprintf(`SELECT %s, %s FROM %s WHERE job = :job AND occurrence = :occurrence ORDER BY attempt`,
			columns, now, runs)),
		Abandon: sqlrun.X(fmt.Sprintf(`UPDATE %s SET state = 'abandoned', finished_at = %s
WHERE job = :job AND occurrence = :occurrence AND state = 'running'`, runs, now)),
		Insert: sqlrun.X(fmt.Sprintf(`INSERT INTO %s (job, occurrence, attempt, state, owner, token, started_at)
VALUES (:job, :occurrence, :attempt, 'running', :owner, :token, %s)`, runs, now)),
		Schedule: sqlrun.X(fmt.Sprintf(`INSERT INTO %[1]s (job, period_us, phase_us, grace_us, first_seen, last_seen)
VALUES (:job, NULLIF(:period, 0), :phase, :grace, %[2]s, %[2]s)
ON CONFLICT (job) DO UPDATE SET
  first_seen = CASE WHEN period_us IS excluded.period_us AND phase_us = excluded.phase_us
    THEN first_seen ELSE excluded.first_seen END,
  period_us = excluded.period_us, phase_us = excluded.phase_us, grace_us = excluded.grace_us,
  last_seen = excluded.last_seen`, jobs, now)),
		Finish: sqlrun.X(fmt.Sprintf(`UPDATE %s SET state = :state, finished_at = %s, error = NULLIF(:error, '')
WHERE job = :job AND occurrence = :occurrence AND attempt = :attempt AND token = :token AND state = 'running'`, runs, now)),
		Runs: sqlrun.Q(fmt.Sprintf(`SELECT %s FROM %s WHERE (:job = '' OR job = :job)
ORDER BY started_at DESC, token DESC LIMIT :limit`, columns, runs)),
		Jobs: sqlrun.Q(fmt.Sprintf(`SELECT job, period_us, phase_us, grace_us, first_seen, last_seen FROM %s
WHERE period_us IS NOT NULL AND (:job = '' OR job = :job) ORDER BY job`, jobs)),
		Occurrences: sqlrun.Q(fmt.Sprintf(`SELECT DISTINCT occurrence FROM %s
WHERE job = :job AND occurrence >= :from AND occurrence <= :to ORDER BY occurrence`, runs)),
		Reap: sqlrun.X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (job, occurrence, attempt) IN (
  SELECT job, occurrence, attempt FROM %[1]s
  WHERE started_at < %[2]s AND coalesce(finished_at, started_at) < %[2]s LIMIT :limit)`, runs, age)),
		ReapJobs: sqlrun.X(fmt.Sprintf(`UPDATE %[1]s SET first_seen = %[2]s WHERE first_seen < %[2]s`, jobs, age)),
	}
}
