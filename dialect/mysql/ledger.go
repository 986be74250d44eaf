package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// ledgerSQL declares the run ledger's statements on the tables runs and
// jobs, on the clock no session setting moves (now).
func ledgerSQL(runs, jobs string) sqlrun.LedgerSQL {
	const age = `(` + now + ` - INTERVAL :age MICROSECOND)`
	columns := fmt.Sprintf(`job, occurrence, attempt, state, owner, token, %s, COALESCE(%s, 0), COALESCE(error, '')`,
		micros("started_at"), micros("finished_at"))
	return sqlrun.LedgerSQL{
		Now: sqlrun.Q(`SELECT ` + micros(now)),
		Attempts: sqlrun.Q(fmt.Sprintf(`SELECT %s, %s FROM %s WHERE job = :job AND occurrence = :occurrence ORDER BY attempt`,
			columns, micros(now), runs)),
		Abandon: sqlrun.X(fmt.Sprintf(`UPDATE %s SET state = 'abandoned', finished_at = %s
WHERE job = :job AND occurrence = :occurrence AND state = 'running'`, runs, now)),
		Insert: sqlrun.X(fmt.Sprintf(`INSERT INTO %s (job, occurrence, attempt, state, owner, token, started_at)
VALUES (:job, :occurrence, :attempt, 'running', :owner, :token, %s)`, runs, now)),
		// MySQL assigns in order, each assignment seeing the ones before:
		// first_seen compares the old period and phase.
		Schedule: sqlrun.X(fmt.Sprintf(`INSERT INTO %[1]s (job, period_us, phase_us, grace_us, first_seen, last_seen)
VALUES (:job, NULLIF(:period, 0), :phase, :grace, %[2]s, %[2]s)
ON DUPLICATE KEY UPDATE
  first_seen = IF(period_us <=> VALUES(period_us) AND phase_us = VALUES(phase_us), first_seen, VALUES(first_seen)),
  period_us = VALUES(period_us), phase_us = VALUES(phase_us), grace_us = VALUES(grace_us),
  last_seen = VALUES(last_seen)`, jobs, now)),
		Finish: sqlrun.X(fmt.Sprintf(`UPDATE %s SET state = :state, finished_at = %s, error = NULLIF(:error, '')
WHERE job = :job AND occurrence = :occurrence AND attempt = :attempt AND token = :token AND state = 'running'`, runs, now)),
		Runs: sqlrun.Q(fmt.Sprintf(`SELECT %s FROM %s WHERE (:job = '' OR job = :job)
ORDER BY started_at DESC, token DESC LIMIT :limit`, columns, runs)),
		Jobs: sqlrun.Q(fmt.Sprintf(`SELECT job, period_us, phase_us, grace_us, %s, %s FROM %s
WHERE period_us IS NOT NULL AND (:job = '' OR job = :job) ORDER BY job`, micros("first_seen"), micros("last_seen"), jobs)),
		Occurrences: sqlrun.Q(fmt.Sprintf(`SELECT DISTINCT occurrence FROM %s
WHERE job = :job AND occurrence >= :from AND occurrence <= :to ORDER BY occurrence`, runs)),
		Reap: sqlrun.X(fmt.Sprintf(`DELETE FROM %[1]s
WHERE started_at < %[2]s AND COALESCE(finished_at, started_at) < %[2]s ORDER BY started_at LIMIT :limit`, runs, age)),
		ReapJobs: sqlrun.X(fmt.Sprintf(`UPDATE %[1]s SET first_seen = %[2]s WHERE first_seen < %[2]s`, jobs, age)),
	}
}

// runLedger is the catalogue's Runs: sqlrun's, after the check that the
// server's clock is the one the statements read (see Dialect.check) for
// the reads of the time that the ledger's occurrences and backoffs rest on.
type runLedger struct {
	*sqlrun.RunLedger
	d *Dialect
}

// Now implements dialect.RunLedger.
func (l runLedger) Now(ctx context.Context) (time.Time, error) {
	if err := l.d.check(ctx); err != nil {
		return time.Time{}, err
	}
	return l.RunLedger.Now(ctx)
}

var _ dialect.RunLedger = runLedger{}

// ledgerTables compiles the run ledger's statements.
func (d *Dialect) ledgerTables(c *sqlrun.Compiler) runLedger {
	runs, jobs := "sqllock_runs", "sqllock_run_jobs"
	sqlrun.Qualify(d.database, quote, &runs, &jobs)
	return runLedger{RunLedger: sqlrun.NewRunLedger(d.run, c, ledgerSQL(runs, jobs)), d: d}
}
