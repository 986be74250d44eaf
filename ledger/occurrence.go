package ledger

import (
	"fmt"
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
	every  bool
	period time.Duration
	phase  time.Duration
	grace  time.Duration
}

// At is the occurrence scheduled at t, as the caller's scheduler reckons it.
// Its key is t in UTC, truncated to the microsecond, in TimeFormat.
func At(t time.Time) Occurrence {
	return Occurrence{key: t.UTC().Truncate(time.Microsecond).Format(TimeFormat)}
}

// Key is the occurrence named k: 1 to MaxKeyLen bytes of valid UTF-8
// without NUL bytes (Run reports another with sqllock.ErrInvalidName).
func Key(k string) Occurrence {
	return Occurrence{key: k}
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
// microseconds. Phase applies only to Every.
func (o Occurrence) Phase(d time.Duration) Occurrence {
	o.phase = d
	return o
}

// Grace returns the occurrence of Every's period whose occurrences Missed
// counts as missed once d has passed since their time with no attempt
// (0, the default: one period). It is recorded with the job. Grace
// applies only to Every.
func (o Occurrence) Grace(d time.Duration) Occurrence {
	o.grace = d
	return o
}

// String describes o.
func (o Occurrence) String() string {
	if o.every {
		return fmt.Sprintf("every %v (phase %v)", o.period, o.phase)
	}
	return o.key
}

// validate reports whether o is usable.
func (o Occurrence) validate() error {
	if !o.every && o.phase == 0 && o.grace == 0 {
		if err := sqllock.ValidateName(o.key); err != nil {
			return fmt.Errorf("ledger: occurrence key %q: %w", o.key, err)
		}
		return nil
	}
	switch {
	case !o.every:
		return fmt.Errorf("%w: ledger: Phase and Grace apply only to Every", sqllock.ErrInvalidOptions)
	case o.period <= 0 || o.period%time.Microsecond != 0:
		return fmt.Errorf("%w: ledger: period %v is not a positive whole number of microseconds", sqllock.ErrInvalidOptions, o.period)
	case o.phase < 0 || o.phase >= o.period || o.phase%time.Microsecond != 0:
		return fmt.Errorf("%w: ledger: phase %v is not a whole number of microseconds in [0, %v)", sqllock.ErrInvalidOptions, o.phase, o.period)
	case o.grace < 0:
		return fmt.Errorf("%w: ledger: grace %v is negative", sqllock.ErrInvalidOptions, o.grace)
	}
	return nil
}

// nearest returns the occurrence of period and phase nearest to now: the
// time phase + n*period closest to it, the later one at a tie.
func nearest(now time.Time, period, phase time.Duration) time.Time {
	p, x := period.Microseconds(), now.UnixMicro()-phase.Microseconds()
	n := floorDiv(x+p/2, p)
	return time.UnixMicro(n*p + phase.Microseconds()).UTC()
}

// floorDiv is a/b rounded toward minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
