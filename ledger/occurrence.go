package ledger

import (
	"fmt"
	"strings"
	"time"

	"github.com/sqllock/sqllock"
)

// TimeFormat is the layout of the occurrences of At and Every: RFC 3339 in
// UTC with exactly six fractional digits, so that keys of the same job sort
// by time as strings.
const TimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// MaxKeyLen is the longest occurrence key, in bytes.
const MaxKeyLen = sqllock.MaxNameLen

// Occurrence says which occurrence of a job a Run is for: a time the caller
// scheduled (At), a key of the caller's (Key), or the multiple of a period
// nearest to the database's time (Every). The zero Occurrence is invalid.
type Occurrence struct {
	key    string
	every  bool // Every or Cron: a scheduled occurrence
	period time.Duration
	phase  time.Duration
	grace  time.Duration
	cron   *crontab // Cron's
	err    error    // Cron's parse error
	early  time.Duration
	// earlySet says Early was called (Early(0): never early).
	earlySet bool
	// manual is Manual's (key "": a new key), or a pending manual
	// occurrence's (see Ledger.RunPending).
	manual bool
	// overlap is Overlap's ("": OverlapSkip).
	overlap Overlap
	// catchUp and window are CatchUp's and CatchUpWindow's.
	catchUp CatchUp
	window  time.Duration
}

// DefaultEarly is how early, at most, a scheduled occurrence is taken by
// default: a Run that asks more than this before an occurrence's time
// runs the occurrence before it, if that is still due, or nothing (see
// Occurrence.Early).
const DefaultEarly = 5 * time.Second

// ManualPrefix starts the key of every manual occurrence (see Manual and
// Ledger.Trigger): "manual/" and the time it was asked for, on the
// database clock, in TimeFormat. Key refuses keys with this prefix.
const ManualPrefix = "manual/"

// At is the occurrence scheduled at t, as the caller's scheduler reckons it.
// Its key is t in UTC, truncated to the microsecond, in TimeFormat.
func At(t time.Time) Occurrence {
	return Occurrence{key: t.UTC().Truncate(time.Microsecond).Format(TimeFormat)}
}

// Key is the occurrence named k: 1 to MaxKeyLen bytes of valid UTF-8
// without NUL bytes (Run reports another with sqllock.ErrInvalidName),
// not starting with ManualPrefix (sqllock.ErrInvalidOptions).
func Key(k string) Occurrence {
	return Occurrence{key: k}
}

// Manual is a manual occurrence of a job, run now by the caller alone: its
// key is ManualPrefix and the database's time when Run asks, so it is
// never one of the job's scheduled occurrences, and it runs even while
// the job is paused. To have one of the job's replicas run it (exactly
// once across them), see Ledger.Trigger.
func Manual() Occurrence {
	return Occurrence{manual: true}
}

// Cron is the occurrence of a job scheduled by the cron expression expr in
// the time zone loc (nil: UTC): five fields (minute, hour, day of month,
// month, day of week), six with seconds first, or a descriptor (@yearly,
// @monthly, @weekly, @daily, @midnight, @hourly). Its occurrence, like
// Every's, is named on the database's clock: the latest time of the
// schedule at or before the database's time, if it is nearer than half the
// way to the next one (or the next one, within Early of it). Its key is
// the occurrence's instant, in UTC, in TimeFormat.
//
// The expression is read on loc's wall clock. Daylight saving: a wall time
// that occurs twice (clocks going back) runs once, at its first instant
// (the summer time one); a wall time that does not occur (clocks going
// forward) runs once, at the end of the gap (02:30 on the day Europe/Berlin
// goes from 02:00 to 03:00 runs at 03:00 CEST), as one occurrence with
// any other time of the schedule that falls there. So an hourly schedule
// has 23 occurrences on the spring day and 24 on the autumn day: one per
// wall-clock hour.
//
// The ledger records the schedule with the job, which lets Missed tell
// the occurrences no replica claimed. Run reports an invalid expression
// (naming the field at fault), an @every descriptor (a period is Every's)
// or a time zone in the expression (TZ=, CRON_TZ=) with
// sqllock.ErrInvalidOptions, as Validate does.
func Cron(expr string, loc *time.Location) Occurrence {
	c, err := parseCron(expr, loc)
	return Occurrence{every: true, cron: c, err: err}
}

// Early returns the scheduled occurrence (of Every or Cron) taken at most
// d before its time (default DefaultEarly, and never more than half the
// time from the occurrence before): replicas whose timers fire up to d
// early agree with those on time, and a run started by hand longer before
// an occurrence does not use it up.
func (o Occurrence) Early(d time.Duration) Occurrence {
	o.early, o.earlySet = d, true
	return o
}

// Every is the occurrence of a job that runs every period: the multiple of
// period since the Unix epoch (plus Phase) nearest to the database's time
// when Run asks. Replicas whose timers fire up to period/2 early or late,
// or whose clocks are off by as much, agree on it: the database's clock is
// the only one read. Its key is the occurrence's time in TimeFormat.
//
// The ledger records the period with the job, which lets Missed tell the
// occurrences that no replica claimed. Run reports a period that is not a
// positive whole number of microseconds with sqllock.ErrInvalidOptions.
func Every(period time.Duration) Occurrence {
	return Occurrence{every: true, period: period}
}

// Phase returns the occurrence of Every's period offset by d from the
// period's multiples: Every(24*time.Hour).Phase(2*time.Hour) is 02:00 UTC
// each day. d must be at least 0 and less than the period, in whole
// microseconds. Phase applies only to Every (not Cron).
func (o Occurrence) Phase(d time.Duration) Occurrence {
	o.phase = d
	return o
}

// Grace returns the scheduled occurrence (of Every or Cron) whose
// occurrences Missed counts as missed once d has passed since their time
// with no attempt (0, the default: the time to the next occurrence). It is
// recorded with the job.
func (o Occurrence) Grace(d time.Duration) Occurrence {
	o.grace = d
	return o
}

// String describes o.
func (o Occurrence) String() string {
	switch {
	case o.cron != nil:
		return fmt.Sprintf("cron %q in %s", o.cron.expr, o.cron.loc)
	case o.every:
		return fmt.Sprintf("every %v (phase %v)", o.period, o.phase)
	case o.manual:
		return "manual"
	}
	return o.key
}

// Next returns the first time of a scheduled occurrence's schedule (Every
// or Cron) after t, by the daylight-saving rule of Cron: what a scheduler
// that wakes its replicas for Run waits for. It returns the zero time when
// o is not a valid scheduled occurrence, or when no time of its schedule
// falls in the five years after t.
func (o Occurrence) Next(t time.Time) time.Time {
	if !o.every || o.Validate() != nil {
		return time.Time{}
	}
	return o.schedule().after(t)
}

// schedule returns the schedule of a scheduled occurrence.
func (o Occurrence) schedule() schedule {
	if o.cron != nil {
		return o.cron
	}
	return periodic{o.period, o.phase}
}

// spec is the schedule the ledger records for o's job ("" but for Cron).
func (o Occurrence) spec() string {
	if o.cron != nil {
		return o.cron.specText()
	}
	return ""
}

// Validate reports whether o is usable, as Run does: an error wrapping
// sqllock.ErrInvalidOptions (or sqllock.ErrInvalidName for a key) that
// names what is wrong.
func (o Occurrence) Validate() error {
	if o.err != nil {
		return o.err
	}
	if o.early < 0 {
		return fmt.Errorf("%w: ledger: early tolerance %v is negative", sqllock.ErrInvalidOptions, o.early)
	}
	if o.manual {
		return nil
	}
	if o.overlap != "" {
		if _, err := ParseOverlap(string(o.overlap)); err != nil {
			return err
		}
	}
	if err := o.validCatchUp(); err != nil {
		return err
	}
	if !o.every && o.phase == 0 && o.grace == 0 && !o.earlySet && o.overlap == "" && o.catchUp == "" && o.window == 0 {
		if err := sqllock.ValidateName(o.key); err != nil {
			return fmt.Errorf("ledger: occurrence key %q: %w", o.key, err)
		}
		if strings.HasPrefix(o.key, ManualPrefix) {
			return fmt.Errorf("%w: ledger: occurrence key %q: %s starts the keys of manual occurrences alone",
				sqllock.ErrInvalidOptions, o.key, ManualPrefix)
		}
		return nil
	}
	switch {
	case !o.every:
		return fmt.Errorf("%w: ledger: Phase, Grace, Early, Overlap and CatchUp apply only to Every and Cron", sqllock.ErrInvalidOptions)
	case o.cron != nil && o.phase != 0:
		return fmt.Errorf("%w: ledger: Phase applies only to Every: a cron expression says its times", sqllock.ErrInvalidOptions)
	case o.cron != nil:
		if o.grace < 0 {
			return fmt.Errorf("%w: ledger: grace %v is negative", sqllock.ErrInvalidOptions, o.grace)
		}
		return nil
	case o.period <= 0 || o.period%time.Microsecond != 0:
		return fmt.Errorf("%w: ledger: period %v is not a positive whole number of microseconds", sqllock.ErrInvalidOptions, o.period)
	case o.phase < 0 || o.phase >= o.period || o.phase%time.Microsecond != 0:
		return fmt.Errorf("%w: ledger: phase %v is not a whole number of microseconds in [0, %v)", sqllock.ErrInvalidOptions, o.phase, o.period)
	case o.grace < 0:
		return fmt.Errorf("%w: ledger: grace %v is negative", sqllock.ErrInvalidOptions, o.grace)
	}
	return nil
}

// due returns the occurrence of s that a claim at now takes: the next
// one if it is at most early away (and nearer than the last), else the
// last one if now is at most half the way to the next; else none (the
// zero time), and the next occurrence's time.
func due(s schedule, now time.Time, early time.Duration) (at, next time.Time) {
	prev, next := s.atOrBefore(now), s.after(now)
	half := time.Duration(1<<63 - 1)
	if !prev.IsZero() && !next.IsZero() {
		half = next.Sub(prev) / 2
	}
	switch {
	case !next.IsZero() && next.Sub(now) <= min(early, half):
		return next, next
	case !prev.IsZero() && now.Sub(prev) <= half:
		return prev, next
	}
	return time.Time{}, next
}

// floorDiv is a/b rounded toward minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
