package sqlrun

import (
	"context"
	"database/sql"
	"time"

	"github.com/sqllock/sqllock/dialect"
)

// runLedger implements RunLedger.
type runLedger struct {
	run                                              *Runner
	now, attempts, abandon, insert, schedule, finish Stmt
	runs, jobs, occurrences, reap, reapJobs          Stmt
	job, pause, resume, forget, forgetRuns           Stmt
	trigger, clear, replace, backfill, endBackfill   Stmt
}

var _ RunLedger = (*runLedger)(nil)

// newRunLedger compiles s; a compile error is kept in c.
func newRunLedger(run *Runner, c *Compiler, s dialect.LedgerSQL) *runLedger {
	return &runLedger{run: run,
		now: c.Compile(s.Now), attempts: c.Compile(s.Attempts), abandon: c.Compile(s.Abandon),
		insert: c.Compile(s.Insert), schedule: c.Compile(s.Schedule), finish: c.Compile(s.Finish),
		runs: c.Compile(s.Runs), jobs: c.Compile(s.Jobs), occurrences: c.Compile(s.Occurrences),
		reap: c.Compile(s.Reap), reapJobs: c.Compile(s.ReapJobs),
		job: c.Compile(s.Job), pause: c.Compile(s.Pause), resume: c.Compile(s.Resume), forget: c.Compile(s.Forget),
		forgetRuns: c.Compile(s.ForgetRuns), trigger: c.Compile(s.Trigger), clear: c.Compile(s.Clear),
		replace: c.Compile(s.Replace), backfill: c.Compile(s.Backfill), endBackfill: c.Compile(s.EndBackfill)}
}

func micros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Now implements RunLedger, after the runner's Check: the
// ledger's occurrences and backoffs rest on the time it reads.
func (l *runLedger) Now(ctx context.Context) (time.Time, error) {
	if err := l.run.check(ctx); err != nil {
		return time.Time{}, err
	}
	us, err := l.run.Int(ctx, &l.now, &Params{})
	return micros(us), err
}

// Attempts implements RunLedger.
func (l *runLedger) Attempts(ctx context.Context, tx *sql.Tx, job, occurrence string) ([]dialect.RunRecord, time.Time, error) {
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

// Abandon implements RunLedger.
func (l *runLedger) Abandon(ctx context.Context, tx *sql.Tx, job, occurrence string) (int, error) {
	n, err := IntOn(ctx, tx, &l.abandon, &Params{Job: job, Occurrence: occurrence})
	return int(n), l.run.Wrap(err)
}

// Replace implements RunLedger.
func (l *runLedger) Replace(ctx context.Context, tx *sql.Tx, job, owner string) (int, error) {
	n, err := IntOn(ctx, tx, &l.replace, &Params{Job: job, Owner: owner})
	return int(n), l.run.Wrap(err)
}

// Start implements RunLedger.
func (l *runLedger) Start(ctx context.Context, tx *sql.Tx, r dialect.RunRecord, s dialect.JobSchedule) error {
	if _, err := IntOn(ctx, tx, &l.insert, &Params{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt,
		Owner: r.Owner, Token: r.Token}); err != nil {
		return l.run.Wrap(err)
	}
	if s.Job == "" {
		return nil
	}
	_, err := IntOn(ctx, tx, &l.schedule, &Params{Job: s.Job, Period: s.Period, Phase: s.Phase, Grace: s.Grace, Spec: s.Spec})
	return l.run.Wrap(err)
}

// Finish implements RunLedger.
func (l *runLedger) Finish(ctx context.Context, tx *sql.Tx, r dialect.RunRecord) (bool, error) {
	n, err := IntOn(ctx, tx, &l.finish, &Params{Job: r.Job, Occurrence: r.Occurrence, Attempt: r.Attempt,
		Token: r.Token, State: r.State, Error: r.Err})
	return n == 1, l.run.Wrap(err)
}

// Runs implements RunLedger.
func (l *runLedger) Runs(ctx context.Context, job string, limit int) ([]dialect.RunRecord, error) {
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

// Jobs implements RunLedger.
func (l *runLedger) Jobs(ctx context.Context, job string) ([]dialect.JobSchedule, time.Time, error) {
	now, err := l.Now(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	var js []dialect.JobSchedule
	err = l.run.Each(ctx, &l.jobs, &Params{Job: job}, func(rows *sql.Rows) error {
		var (
			s                                 dialect.JobSchedule
			period, phase, grace, first, last int64
			paused, resumed                   int64
		)
		err := rows.Scan(&s.Job, &period, &phase, &grace, &first, &last, &s.Spec, &paused, &resumed, &s.Pending,
			&s.BackfillFrom, &s.BackfillTo)
		s.Period, s.Phase, s.Grace = time.Duration(period)*time.Microsecond,
			time.Duration(phase)*time.Microsecond, time.Duration(grace)*time.Microsecond
		s.FirstSeen, s.LastSeen = micros(first), micros(last)
		if paused != 0 {
			s.PausedAt = micros(paused)
		}
		if resumed != 0 {
			s.ResumedAt = micros(resumed)
		}
		js = append(js, s)
		return err
	})
	return js, now, err
}

// Job implements RunLedger, after the runner's Check (as Now).
func (l *runLedger) Job(ctx context.Context, job string) (JobState, error) {
	if err := l.run.check(ctx); err != nil {
		return JobState{}, err
	}
	var (
		s       JobState
		us      int64
		known   int
		matched bool
	)
	err := l.run.Each(ctx, &l.job, &Params{Job: job}, func(rows *sql.Rows) error {
		matched = true
		var period, phase int64
		err := rows.Scan(&us, &known, &s.Pending, &period, &phase, &s.Spec, &s.BackfillFrom, &s.BackfillTo)
		s.Period, s.Phase = time.Duration(period)*time.Microsecond, time.Duration(phase)*time.Microsecond
		return err
	})
	if err == nil && !matched {
		err = sql.ErrNoRows
	}
	s.Now, s.Known, s.Paused = micros(us), known != 0, known == 2
	return s, err
}

// Schedule implements RunLedger.
func (l *runLedger) Schedule(ctx context.Context, s dialect.JobSchedule) error {
	_, err := l.run.Int(ctx, &l.schedule, &Params{Job: s.Job, Period: s.Period, Phase: s.Phase, Grace: s.Grace, Spec: s.Spec})
	return err
}

// Pause implements RunLedger.
func (l *runLedger) Pause(ctx context.Context, job string) (bool, error) {
	n, err := l.run.Int(ctx, &l.pause, &Params{Job: job})
	return n > 0, err
}

// Resume implements RunLedger.
func (l *runLedger) Resume(ctx context.Context, job string) (bool, error) {
	n, err := l.run.Int(ctx, &l.resume, &Params{Job: job})
	return n > 0, err
}

// Forget implements RunLedger.
func (l *runLedger) Forget(ctx context.Context, job string, attempts bool) (bool, int, error) {
	n, err := l.run.Int(ctx, &l.forget, &Params{Job: job})
	if err != nil || !attempts {
		return n > 0, 0, err
	}
	m, err := l.run.Int(ctx, &l.forgetRuns, &Params{Job: job})
	return n > 0, int(m), err
}

// Trigger implements RunLedger.
func (l *runLedger) Trigger(ctx context.Context, job, occurrence string) error {
	_, err := l.run.Int(ctx, &l.trigger, &Params{Job: job, Occurrence: occurrence})
	return err
}

// Clear implements RunLedger.
func (l *runLedger) Clear(ctx context.Context, tx *sql.Tx, job, occurrence string) error {
	_, err := IntOn(ctx, tx, &l.clear, &Params{Job: job, Occurrence: occurrence})
	return l.run.Wrap(err)
}

// Backfill implements RunLedger.
func (l *runLedger) Backfill(ctx context.Context, job, from, to string) (bool, error) {
	n, err := l.run.Int(ctx, &l.backfill, &Params{Job: job, From: from, To: to})
	return n > 0, err
}

// EndBackfill implements RunLedger.
func (l *runLedger) EndBackfill(ctx context.Context, job, from, to string) error {
	_, err := l.run.Int(ctx, &l.endBackfill, &Params{Job: job, From: from, To: to})
	return err
}

// Occurrences implements RunLedger.
func (l *runLedger) Occurrences(ctx context.Context, job, from, to string) ([]string, error) {
	var occs []string
	err := l.run.Each(ctx, &l.occurrences, &Params{Job: job, From: from, To: to}, func(rows *sql.Rows) error {
		var o string
		err := rows.Scan(&o)
		occs = append(occs, o)
		return err
	})
	return occs, err
}

// Reap implements RunLedger.
func (l *runLedger) Reap(ctx context.Context, age time.Duration, limit int) (int, error) {
	n, err := l.run.Int(ctx, &l.reap, &Params{Age: age, Limit: limit})
	if err != nil {
		return int(n), err
	}
	_, err = l.run.Int(ctx, &l.reapJobs, &Params{Age: age})
	return int(n), err
}
