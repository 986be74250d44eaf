package sqlrun

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// LedgerSQL declares the statements of the run ledger (dialect.RunLedger).
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

// RunLedger implements dialect.RunLedger.
type RunLedger struct {
	run                                              *Runner
	now, attempts, abandon, insert, schedule, finish Stmt
	runs, jobs, occurrences, reap, reapJobs          Stmt
}

var _ dialect.RunLedger = (*RunLedger)(nil)

// NewRunLedger compiles s; a compile error is kept in c.
func NewRunLedger(run *Runner, c *Compiler, s LedgerSQL) *RunLedger {
	return &RunLedger{run: run,
		now: c.Compile(s.Now), attempts: c.Compile(s.Attempts), abandon: c.Compile(s.Abandon),
		insert: c.Compile(s.Insert), schedule: c.Compile(s.Schedule), finish: c.Compile(s.Finish),
		runs: c.Compile(s.Runs), jobs: c.Compile(s.Jobs), occurrences: c.Compile(s.Occurrences),
		reap: c.Compile(s.Reap), reapJobs: c.Compile(s.ReapJobs)}
}

func micros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Now implements dialect.RunLedger, after the runner's Check: the
// ledger's occurrences and backoffs rest on the time it reads.
func (l *RunLedger) Now(ctx context.Context) (time.Time, error) {
	if err := l.run.check(ctx); err != nil {
		return time.Time{}, err
	}
	us, err := l.run.Int(ctx, &l.now, &Params{})
	return micros(us), err
}

// Attempts implements dialect.RunLedger.
func (l *RunLedger) Attempts(ctx context.Context, tx *sql.Tx, job, occurrence string) ([]dialect.RunRecord, time.Time, error) {
	var (
		rs  []dialect.RunRecord
		now time.Time
	)
	err := EachOn(ctx, tx, l.run.Wrap, &l.attempts, &Params{Job: job, Occurrence: occurrence}, func(rows *sql.Rows) error {
		var us int64
		r, err := scanRun(rows, &us)
		rs, now = append(rs, r), micros(us)
		return err
	})
	return rs, now, err
}

// Abandon implements dialect.RunLedger.
func (l *RunLedger) Abandon(ctx context.Context, tx *sql.Tx, job, occurrence string) (int, error) {
	n, err := IntOn(ctx, tx, &l.abandon, &Params{Job: job, Occurrence: occurrence})
	return int(n), l.run.Wrap(err)
}

// Start implements dialect.RunLedger.
func (l *RunLedger) Start(ctx context.Context, tx *sql.Tx, r dialect.RunRecord, s dialect.JobSchedule) error {
	if _, err := IntOn(ctx, tx, &l.insert, &Params{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt,
		Owner: r.Owner, Token: r.Token}); err != nil {
		return l.run.Wrap(err)
	}
	_, err := IntOn(ctx, tx, &l.schedule, &Params{Job: s.Job, Period: s.Period, Phase: s.Phase, Grace: s.Grace})
	return l.run.Wrap(err)
}

// Finish implements dialect.RunLedger.
func (l *RunLedger) Finish(ctx context.Context, tx *sql.Tx, r dialect.RunRecord) (bool, error) {
	n, err := IntOn(ctx, tx, &l.finish, &Params{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt,
		Token: r.Token, State: r.State, Error: r.Err})
	return n == 1, l.run.Wrap(err)
}

// Runs implements dialect.RunLedger.
func (l *RunLedger) Runs(ctx context.Context, job string, limit int) ([]dialect.RunRecord, error) {
	var rs []dialect.RunRecord
	err := l.run.Each(ctx, &l.runs, &Params{Job: job, Limit: limit}, func(rows *sql.Rows) error {
		r, err := scanRun(rows)
		rs = append(rs, r)
		return err
	})
	return rs, err
}

// scanRun scans a row of LedgerSQL.Runs, and into more the columns after
// Runs's.
func scanRun(rows *sql.Rows, more ...any) (dialect.RunRecord, error) {
	var (
		r                 dialect.RunRecord
		started, finished int64
	)
	err := rows.Scan(append([]any{&r.Job, &r.Occurrence, &r.Attempt, &r.State, &r.Owner, &r.Token, &started, &finished, &r.Err}, more...)...)
	r.StartedAt = micros(started)
	if finished != 0 {
		r.FinishedAt = micros(finished)
	}
	return r, err
}

// Jobs implements dialect.RunLedger.
func (l *RunLedger) Jobs(ctx context.Context, job string) ([]dialect.JobSchedule, time.Time, error) {
	now, err := l.Now(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	var js []dialect.JobSchedule
	err = l.run.Each(ctx, &l.jobs, &Params{Job: job}, func(rows *sql.Rows) error {
		var (
			s                                 dialect.JobSchedule
			period, phase, grace, first, last int64
		)
		err := rows.Scan(&s.Job, &period, &phase, &grace, &first, &last)
		s.Period, s.Phase, s.Grace = time.Duration(period)*time.Microsecond,
			time.Duration(phase)*time.Microsecond, time.Duration(grace)*time.Microsecond
		s.FirstSeen, s.LastSeen = micros(first), micros(last)
		js = append(js, s)
		return err
	})
	return js, now, err
}

// Occurrences implements dialect.RunLedger.
func (l *RunLedger) Occurrences(ctx context.Context, job, from, to string) ([]string, error) {
	var occs []string
	err := l.run.Each(ctx, &l.occurrences, &Params{Job: job, From: from, To: to}, func(rows *sql.Rows) error {
		var o string
		err := rows.Scan(&o)
		occs = append(occs, o)
		return err
	})
	return occs, err
}

// Reap implements dialect.RunLedger.
func (l *RunLedger) Reap(ctx context.Context, age time.Duration, limit int) (int, error) {
	n, err := l.run.Int(ctx, &l.reap, &Params{Age: age, Limit: limit})
	if err != nil {
		return int(n), err
	}
	_, err = l.run.Int(ctx, &l.reapJobs, &Params{Age: age})
	return int(n), err
}
