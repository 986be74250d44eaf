package ledger

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sqllock/sqllock"
)

// schedule is the times of a periodic job's occurrences.
type schedule interface {
	// after returns the first occurrence after t (the zero time if there
	// is none in the next five years).
	after(t time.Time) time.Time
	// atOrBefore returns the latest occurrence at or before t (the zero
	// time if there is none in the five years before).
	atOrBefore(t time.Time) time.Time
}

// periodic is Every's schedule: phase + n*period since the Unix epoch.
type periodic struct{ period, phase time.Duration }

func (p periodic) atOrBefore(t time.Time) time.Time {
	per, x := p.period.Microseconds(), t.UnixMicro()-p.phase.Microseconds()
	return time.UnixMicro(floorDiv(x, per)*per + p.phase.Microseconds()).UTC()
}

func (p periodic) after(t time.Time) time.Time { return p.atOrBefore(t).Add(p.period) }

// cronParser reads the expressions of Cron: five fields, or six with
// seconds first, or a descriptor (@hourly, @daily, ...).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronFields names the fields of a cron expression, by their count.
var cronFields = map[int][]string{
	5: {"minute", "hour", "day of month", "month", "day of week"},
	6: {"second", "minute", "hour", "day of month", "month", "day of week"},
}

// crontab is Cron's schedule: the wall-clock times of a cron expression in
// a time zone, each mapped to one instant (see wallInstant).
type crontab struct {
	spec *cron.SpecSchedule // in UTC, read as the zone's wall clock
	loc  *time.Location
	expr string
}

// parseCron parses expr in loc (nil: UTC), naming the field at fault.
func parseCron(expr string, loc *time.Location) (*crontab, error) {
	if loc == nil {
		loc = time.UTC
	}
	expr = strings.TrimSpace(expr)
	switch {
	case loc.String() == "Local" || loc.String() == "":
		return nil, fmt.Errorf("%w: ledger: cron: a time zone is named (time.LoadLocation), not the process's Local", sqllock.ErrInvalidOptions)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("%w: ledger: cron %q: give the time zone apart, not in the expression", sqllock.ErrInvalidOptions, expr)
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("%w: ledger: cron %q: a fixed period is Every's", sqllock.ErrInvalidOptions, expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: ledger: cron %q: %s", sqllock.ErrInvalidOptions, expr, cronFieldError(expr, err))
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%w: ledger: cron %q: not a calendar schedule", sqllock.ErrInvalidOptions, expr)
	}
	spec.Location = time.UTC
	c := &crontab{spec: spec, loc: loc, expr: expr}
	if c.after(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: ledger: cron %q: no time in the next five years matches it", sqllock.ErrInvalidOptions, expr)
	}
	return c, nil
}

// cronFieldError names the field of expr that err is about, if one alone
// fails to parse with every other field a wildcard.
func cronFieldError(expr string, err error) string {
	fields := strings.Fields(expr)
	names, ok := cronFields[len(fields)]
	if !ok {
		return fmt.Sprintf("want 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or a descriptor such as @daily; got %d", len(fields))
	}
	for i, f := range fields {
		probe := make([]string, len(fields))
		for j := range probe {
			probe[j] = "*"
		}
		probe[i] = f
		if _, perr := cronParser.Parse(strings.Join(probe, " ")); perr != nil {
			return fmt.Sprintf("%s field %q: %v", names[i], f, perr)
		}
	}
	return err.Error()
}

// specText is c as the ledger records it, parsed back by parseSpec.
func (c *crontab) specText() string { return "CRON_TZ=" + c.loc.String() + " " + c.expr }

// parseSpec parses a recorded schedule (see specText).
func parseSpec(s string) (*crontab, error) {
	tz, expr, ok := strings.Cut(strings.TrimPrefix(s, "CRON_TZ="), " ")
	if !ok || !strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("ledger: recorded schedule %q is not CRON_TZ=ZONE EXPRESSION", s)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("ledger: recorded schedule %q: %w", s, err)
	}
	return parseCron(expr, loc)
}

// wall is t's wall clock in loc, as a UTC time.
func wall(t time.Time, loc *time.Location) time.Time {
	y, mo, d := t.In(loc).Date()
	h, mi, s := t.In(loc).Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// wallInstant is the instant of the wall-clock time w (a UTC time read as
// loc's wall clock), by the ledger's daylight-saving rule: a wall time
// that occurs twice (the hour repeated when clocks go back) is its first
// instant; one that does not occur (the hour skipped when clocks go
// forward) is the end of the gap, the first instant after it. The mapping
// never decreases as w grows.
func wallInstant(w time.Time, loc *time.Location) time.Time {
	_, before := w.Add(-36 * time.Hour).In(loc).Zone()
	_, after := w.Add(36 * time.Hour).In(loc).Zone()
	var first time.Time
	for _, off := range []int{before, after} {
		t := w.Add(-time.Duration(off) * time.Second)
		if wall(t, loc).Equal(w) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if !first.IsZero() {
		return first.UTC()
	}
	start, _ := w.Add(-time.Duration(before) * time.Second).In(loc).ZoneBounds()
	return start.UTC()
}

func (c *crontab) after(t time.Time) time.Time {
	// Wall times from t's own map to instants at or after t's first
	// instant: step on until one is after t.
	for w := wall(t, c.loc); ; {
		w = c.spec.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if at := wallInstant(w, c.loc); at.After(t) {
			return at
		}
	}
}

func (c *crontab) atOrBefore(t time.Time) time.Time {
	// Walk forward from ever earlier starts until one finds an
	// occurrence at or before t.
	for back := time.Minute; back < 6*366*24*time.Hour; back *= 16 {
		var last time.Time
		for w := wall(t.Add(-back), c.loc).Add(-time.Second); ; {
			w = c.spec.Next(w)
			if w.IsZero() {
				break
			}
			at := wallInstant(w, c.loc)
			if at.After(t) {
				break
			}
			last = at
		}
		if !last.IsZero() {
			return last
		}
	}
	return time.Time{}
}

// between returns the occurrences of s from from to to, both included,
// ascending: at most n, the latest ones.
func between(s schedule, from, to time.Time, n int) []time.Time {
	if p, ok := s.(periodic); ok {
		first := p.after(from.Add(-time.Microsecond))
		if k := int64(to.Sub(first)/p.period) + 1; k > int64(n) {
			first = first.Add(time.Duration(k-int64(n)) * p.period)
		}
		var ts []time.Time
		for t := first; !t.After(to); t = t.Add(p.period) {
			ts = append(ts, t)
		}
		return ts
	}
	// A cron schedule: look back from to, over ever longer spans, until n
	// occurrences or from is reached.
	gap := max(to.Sub(s.atOrBefore(to.Add(-time.Microsecond))), time.Second)
	for span := gap * time.Duration(n); ; span *= 4 {
		start := to.Add(-span)
		if !start.After(from) {
			start = from
		}
		var ts []time.Time
		for t := s.after(start.Add(-time.Microsecond)); !t.IsZero() && !t.After(to); t = s.after(t) {
			ts = append(ts, t)
		}
		if len(ts) >= n || start.Equal(from) {
			if len(ts) > n {
				ts = ts[len(ts)-n:]
			}
			return ts
		}
	}
}
