package dialect

import (
	"fmt"
	"time"
)

// RunRecord is a row of the run ledger: one attempt of an occurrence.
type RunRecord struct {
	Job, Occurrence string
	Attempt         int
	// State is "running", "succeeded", "failed" or "abandoned".
	State string
	Owner string
	Token int64
	// StartedAt is when the attempt was claimed; FinishedAt when its
	// outcome was recorded (zero while it runs).
	StartedAt, FinishedAt time.Time
	// Err is a failed attempt's error text.
	Err string
}

// JobSchedule is a job's row of the run ledger.
type JobSchedule struct {
	Job string
	// Period is the time between occurrences (0: the caller names the
	// occurrences), Phase their offset from the multiples of Period
	// since the Unix epoch, Grace how long after its time an occurrence
	// with no attempt counts as missed (0: the reader's default).
	Period, Phase, Grace time.Duration
	// FirstSeen is the start of the job's history under this period;
	// LastSeen its latest start of an attempt.
	FirstSeen, LastSeen time.Time
}

// LedgerSQL declares the statements of the run ledger (RunLedger in
// internal/sqlrun).
// Times are selected as microseconds since the Unix epoch, on the database
// clock; inside a transaction, the clock's time at the statement, not the
// transaction's start.
//
//	Now          select the database's time
//	Attempts     select :job's attempts of :occurrence, by attempt, as
//	             Runs selects them, and the database's time as a last
//	             column
//	Abandon      mark (:job, :occurrence)'s running attempts abandoned
//	Insert       insert attempt :attempt of (:job, :occurrence), running,
//	             with :owner and :token
//	Schedule     upsert :job's row with :period (0: NULL), :phase and
//	             :grace; a new row, or one whose period or phase changed,
//	             is first seen now; every upsert sets last seen to now
//	Finish       set the running attempt (:job, :occurrence, :attempt,
//	             :token) to :state with :error (empty: NULL)
//	Runs         select up to :limit attempts of :job ('' for all), the
//	             latest started first: job, occurrence, attempt, state,
//	             owner, token, started, finished (0 while running), error
//	             ('' for none)
//	Jobs         select :job's row ('' for all) if it has a period: job,
//	             period, phase, grace, first seen, last seen
//	Occurrences  select :job's distinct occurrences from :from to :to,
//	             ascending
//	Reap         delete up to :limit attempts finished (or, unfinished,
//	             started) more than :age ago
//	ReapJobs     move first seen of the jobs first seen more than :age ago
//	             to :age ago
type LedgerSQL struct {
	Now, Attempts, Abandon, Insert, Schedule, Finish SQL
	Runs, Jobs, Occurrences, Reap, ReapJobs          SQL
}

// LedgerTerms are a dialect's words for the run ledger's portable
// statements (see PortableLedgerSQL).
type LedgerTerms struct {
	Runs, Jobs string // the tables, qualified
	Now        string // the database's time
	Age        string // the time :age before Now
	Job        string // :job, cast to text where the database cannot infer it
	// Micros returns the microseconds since the Unix epoch of a time
	// column, or of Now.
	Micros func(string) string
}

// PortableLedgerSQL declares the run ledger's statements that read the
// same on every database: all but Schedule, whose upsert is each
// database's own. A dialect replaces any it must.
func PortableLedgerSQL(w LedgerTerms) LedgerSQL {
	columns := fmt.Sprintf(`job, occurrence, attempt, state, owner, token, %s, COALESCE(%s, 0), COALESCE(error, '')`,
		w.Micros("started_at"), w.Micros("finished_at"))
	return LedgerSQL{
		Now: Q(`SELECT ` + w.Micros(w.Now)),
		Attempts: Q(fmt.Sprintf(`SELECT %s, %s FROM %s WHERE job = :job AND occurrence = :occurrence ORDER BY attempt`,
			columns, w.Micros(w.Now), w.Runs)),
		Abandon: X(fmt.Sprintf(`UPDATE %s SET state = 'abandoned', finished_at = %s
WHERE job = :job AND occurrence = :occurrence AND state = 'running'`, w.Runs, w.Now)),
		Insert: X(fmt.Sprintf(`INSERT INTO %s (job, occurrence, attempt, state, owner, token, started_at)
VALUES (:job, :occurrence, :attempt, 'running', :owner, :token, %s)`, w.Runs, w.Now)),
		Finish: X(fmt.Sprintf(`UPDATE %s SET state = :state, finished_at = %s, error = NULLIF(:error, '')
WHERE job = :job AND occurrence = :occurrence AND attempt = :attempt AND token = :token AND state = 'running'`, w.Runs, w.Now)),
		Runs: Q(fmt.Sprintf(`SELECT %s FROM %s WHERE (%s = '' OR job = :job)
ORDER BY started_at DESC, token DESC LIMIT :limit`, columns, w.Runs, w.Job)),
		Jobs: Q(fmt.Sprintf(`SELECT job, period_us, phase_us, grace_us, %s, %s FROM %s
WHERE period_us IS NOT NULL AND (%s = '' OR job = :job) ORDER BY job`, w.Micros("first_seen"), w.Micros("last_seen"), w.Jobs, w.Job)),
		Occurrences: Q(fmt.Sprintf(`SELECT DISTINCT occurrence FROM %s
WHERE job = :job AND occurrence >= :from AND occurrence <= :to ORDER BY occurrence`, w.Runs)),
		Reap: X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (job, occurrence, attempt) IN (
  SELECT job, occurrence, attempt FROM %[1]s
  WHERE started_at < %[2]s AND COALESCE(finished_at, started_at) < %[2]s LIMIT :limit)`, w.Runs, w.Age)),
		ReapJobs: X(fmt.Sprintf(`UPDATE %[1]s SET first_seen = %[2]s WHERE first_seen < %[2]s`, w.Jobs, w.Age)),
	}
}
