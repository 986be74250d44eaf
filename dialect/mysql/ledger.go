package mysql

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// ledgerSQL declares the run ledger's statements on the tables runs and
// jobs, on the clock no session setting moves (now).
func ledgerSQL(runs, jobs string) dialect.LedgerSQL {
	const age = `(` + now + ` - INTERVAL :age MICROSECOND)`
	s := dialect.PortableLedgerSQL(dialect.LedgerTerms{Runs: runs, Jobs: jobs, Now: now, Age: age, Job: ":job", Micros: micros})
	// MySQL assigns in order, each assignment seeing the ones before:
	// first_seen compares the old period and phase.
	s.Schedule = dialect.X(fmt.Sprintf(`INSERT INTO %[1]s (job, period_us, phase_us, grace_us, spec, first_seen, last_seen)
VALUES (:job, NULLIF(:period, 0), :phase, :grace, :spec, %[2]s, %[2]s)
ON DUPLICATE KEY UPDATE
  first_seen = IF(period_us <=> VALUES(period_us) AND phase_us = VALUES(phase_us) AND spec = VALUES(spec),
    first_seen, VALUES(first_seen)),
  period_us = VALUES(period_us), phase_us = VALUES(phase_us), grace_us = VALUES(grace_us), spec = VALUES(spec),
  last_seen = VALUES(last_seen)`, jobs, now))
	// MySQL cannot LIMIT a subquery under IN; its DELETE takes a LIMIT.
	s.Reap = dialect.X(fmt.Sprintf(`DELETE FROM %[1]s
WHERE started_at < %[2]s AND COALESCE(finished_at, started_at) < %[2]s ORDER BY started_at LIMIT :limit`, runs, age))
	return s
}

// runsSQL declares the run ledger's statements.
func (d *Dialect) runsSQL() *dialect.LedgerSQL {
	runs, jobs := "sqllock_runs", "sqllock_run_jobs"
	sqlrun.Qualify(d.database, quote, &runs, &jobs)
	return ptr(ledgerSQL(runs, jobs))
}
