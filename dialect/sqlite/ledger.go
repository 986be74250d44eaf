package sqlite

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
)

// ledgerSQL declares the run ledger's statements. Times are stored as
// microseconds since the Unix epoch.
func ledgerSQL() dialect.LedgerSQL {
	const (
		jobs = "sqllock_run_jobs"
		age  = `(` + now + ` - :age)`
	)
	s := dialect.PortableLedgerSQL(dialect.LedgerTerms{Runs: "sqllock_runs", Jobs: jobs, Now: now, Age: age, Job: ":job",
		Micros: func(col string) string { return col }})
	s.Schedule = dialect.X(fmt.Sprintf(`INSERT INTO %[1]s (job, period_us, phase_us, grace_us, spec, first_seen, last_seen)
VALUES (:job, NULLIF(:period, 0), :phase, :grace, :spec, %[2]s, %[2]s)
ON CONFLICT (job) DO UPDATE SET
  first_seen = CASE WHEN period_us IS excluded.period_us AND phase_us = excluded.phase_us AND spec = excluded.spec
    THEN first_seen ELSE excluded.first_seen END,
  period_us = excluded.period_us, phase_us = excluded.phase_us, grace_us = excluded.grace_us, spec = excluded.spec,
  last_seen = excluded.last_seen`, jobs, now))
	return s
}
