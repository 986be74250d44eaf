package postgres

import (
	"fmt"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
)

// ledgerSQL declares the run ledger's statements on the tables runs and
// jobs. They run inside the ledger's guarded transactions, so their time
// is clock_timestamp(), not the transaction's start.
func ledgerSQL(runs, jobs string) dialect.LedgerSQL {
	const (
		now = `clock_timestamp()`
		age = `clock_timestamp() - CAST(:age AS bigint) * interval '1 microsecond'`
	)
	s := dialect.PortableLedgerSQL(dialect.LedgerTerms{Runs: runs, Jobs: jobs, Now: now, Age: age,
		Job: `CAST(:job AS text)`, Micros: micros}) // a bare '' = :job has no type to infer
	s.Schedule = dialect.X(fmt.Sprintf(`INSERT INTO %s AS j (job, period_us, phase_us, grace_us, spec, first_seen, last_seen)
VALUES (:job, NULLIF(CAST(:period AS bigint), 0), CAST(:phase AS bigint), CAST(:grace AS bigint), CAST(:spec AS text), %[2]s, %[2]s)
ON CONFLICT (job) DO UPDATE SET
  first_seen = CASE WHEN j.period_us IS NOT DISTINCT FROM excluded.period_us AND j.phase_us = excluded.phase_us
    AND j.spec = excluded.spec THEN j.first_seen ELSE excluded.first_seen END,
  period_us = excluded.period_us, phase_us = excluded.phase_us, grace_us = excluded.grace_us, spec = excluded.spec,
  last_seen = excluded.last_seen`, jobs, now))
	return s
}

// runsSQL declares the run ledger's statements.
func (d *Dialect) runsSQL() *dialect.LedgerSQL {
	runs, jobs := "sqllock_runs", "sqllock_run_jobs"
	sqlrun.Qualify(d.schema, quote, &runs, &jobs)
	return ptr(ledgerSQL(runs, jobs))
}
