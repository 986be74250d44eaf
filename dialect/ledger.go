package dialect

import (
	"fmt"
	"time"
)

// RunRecord is a row of the run ledger: one attempt of an occurrence.
type RunRecord struct {
	Job, Occurrence string
	Attempt         int
	// State is "running", "succeeded", "failed", "abandoned", "skipped"
	// or "replaced" (the last two from schema version 21).
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
	// Spec is the job's cron schedule, "CRON_TZ=ZONE EXPRESSION" ("" for
	// none).
	Spec string
	// FirstSeen is the start of the job's history under this schedule;
	// LastSeen its latest start of an attempt.
	FirstSeen, LastSeen time.Time
	// PausedAt is when the job was last paused (zero if never),
	// ResumedAt when it was resumed after (zero while it is paused).
	PausedAt, ResumedAt time.Time
	// Pending is the key of a manual occurrence asked for and not run
	// yet ("" for none).
	Pending string
	// BackfillFrom and BackfillTo are the first and last occurrence keys
	// of a backfill asked of the job's replicas and not run yet ("" for
	// none; schema version 26).
	BackfillFrom, BackfillTo string
}

// Paused reports whether s's job is paused.
func (s JobSchedule) Paused() bool { return !s.PausedAt.IsZero() && s.ResumedAt.IsZero() }

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
//	Schedule     upsert :job's row with :period (0: NULL), :phase, :grace
//	             and :spec; a new row, or one whose period, phase or spec
//	             changed, is first seen now; every upsert sets last seen
//	             to now (it leaves the pause and pending columns alone)
//	Finish       set the running attempt (:job, :occurrence, :attempt,
//	             :token) to :state with :error (empty: NULL)
//	Runs         select up to :limit attempts of :job ('' for all), the
//	             latest started first: job, occurrence, attempt, state,
//	             owner, token, started, finished (0 while running), error
//	             ('' for none)
//	Jobs         select :job's row ('' for all): job, period (0 for
//	             NULL), phase, grace, first seen, last seen, spec, paused
//	             at, resumed at (0 for NULL), pending, backfill from and
//	             backfill to ('' for NULL)
//	Job          select the database's time, 0 if :job has no row, 2 if
//	             it is paused (paused at set, resumed at NULL), else 1,
//	             its pending key ('' for none), period (0 for none), phase,
//	             spec, backfill from and backfill to ('' for none), in one
//	             row even when :job has none
//	Pause        set :job's paused at to now and resumed at to NULL,
//	             unless it is paused; first seen moves on to the end of
//	             the pause before, if that is later
//	Resume       set paused :job's resumed at to now
//	Forget       delete :job's row
//	ForgetRuns   delete :job's attempts
//	Trigger      set :job's pending key to :occurrence unless one is set
//	Clear        set :job's pending key to NULL if it is :occurrence
//	Backfill     set :job's backfill range to :from and :to unless one is
//	             set
//	EndBackfill  set :job's backfill range to NULL if it is :from and :to
//	Replace      mark :job's running attempts of :owner replaced
//	Occurrences  select :job's distinct occurrences from :from to :to,
//	             ascending
//	Reap         delete up to :limit attempts finished (or, unfinished,
//	             started) more than :age ago
//	ReapJobs     move first seen of the jobs first seen more than :age ago
//	             to :age ago
type LedgerSQL struct {
	Now, Attempts, Abandon, Insert, Schedule, Finish SQL
	Runs, Jobs, Occurrences, Reap, ReapJobs          SQL
	Job, Pause, Resume, Forget, ForgetRuns           SQL
	Trigger, Clear, Replace, Backfill, EndBackfill   SQL
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
		Jobs: Q(fmt.Sprintf(`SELECT job, COALESCE(period_us, 0), phase_us, grace_us, %s, %s, spec,
  COALESCE(%s, 0), COALESCE(%s, 0), COALESCE(pending, ''), COALESCE(backfill_from, ''), COALESCE(backfill_to, '') FROM %s
WHERE (%s = '' OR job = :job) ORDER BY job`, w.Micros("first_seen"), w.Micros("last_seen"),
			w.Micros("paused_at"), w.Micros("resumed_at"), w.Jobs, w.Job)),
		Job: Q(fmt.Sprintf(`SELECT %s, CASE WHEN j.job IS NULL THEN 0
  WHEN j.paused_at IS NOT NULL AND j.resumed_at IS NULL THEN 2 ELSE 1 END,
  COALESCE(j.pending, ''), COALESCE(j.period_us, 0), COALESCE(j.phase_us, 0), COALESCE(j.spec, ''),
  COALESCE(j.backfill_from, ''), COALESCE(j.backfill_to, '')
FROM (SELECT 1 AS one) o LEFT JOIN %s j ON j.job = :job`, w.Micros(w.Now), w.Jobs)),
		Pause: X(fmt.Sprintf(`UPDATE %s SET
  first_seen = CASE WHEN resumed_at IS NOT NULL AND resumed_at > first_seen THEN resumed_at ELSE first_seen END,
  paused_at = %s, resumed_at = NULL
WHERE job = :job AND (paused_at IS NULL OR resumed_at IS NOT NULL)`, w.Jobs, w.Now)),
		Resume: X(fmt.Sprintf(`UPDATE %s SET resumed_at = %s
WHERE job = :job AND paused_at IS NOT NULL AND resumed_at IS NULL`, w.Jobs, w.Now)),
		Forget:     X(fmt.Sprintf(`DELETE FROM %s WHERE job = :job`, w.Jobs)),
		ForgetRuns: X(fmt.Sprintf(`DELETE FROM %s WHERE job = :job`, w.Runs)),
		Trigger:    X(fmt.Sprintf(`UPDATE %s SET pending = COALESCE(pending, :occurrence) WHERE job = :job`, w.Jobs)),
		Clear:      X(fmt.Sprintf(`UPDATE %s SET pending = NULL WHERE job = :job AND pending = :occurrence`, w.Jobs)),
		Backfill: X(fmt.Sprintf(`UPDATE %s SET backfill_from = :from, backfill_to = :to
WHERE job = :job AND backfill_from IS NULL`, w.Jobs)),
		EndBackfill: X(fmt.Sprintf(`UPDATE %s SET backfill_from = NULL, backfill_to = NULL
WHERE job = :job AND backfill_from = :from AND backfill_to = :to`, w.Jobs)),
		Replace: X(fmt.Sprintf(`UPDATE %s SET state = 'replaced', finished_at = %s
WHERE job = :job AND owner = :owner AND state = 'running'`, w.Runs, w.Now)),
		Occurrences: Q(fmt.Sprintf(`SELECT DISTINCT occurrence FROM %s
WHERE job = :job AND occurrence >= :from AND occurrence <= :to ORDER BY occurrence`, w.Runs)),
		Reap: X(fmt.Sprintf(`DELETE FROM %[1]s WHERE (job, occurrence, attempt) IN (
  SELECT job, occurrence, attempt FROM %[1]s
  WHERE started_at < %[2]s AND COALESCE(finished_at, started_at) < %[2]s LIMIT :limit)`, w.Runs, w.Age)),
		ReapJobs: X(fmt.Sprintf(`UPDATE %[1]s SET first_seen = %[2]s WHERE first_seen < %[2]s`, w.Jobs, w.Age)),
	}
}
