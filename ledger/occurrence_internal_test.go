package ledger

import (
	"strings"
	"testing"
	"time"
)

func TestDueAgreesWithinHalfAPeriod(t *testing.T) {
	for _, c := range []struct {
		period, phase time.Duration
		at            time.Time
	}{
		{time.Second, 0, time.Date(2026, 11, 26, 15, 0, 7, 0, time.UTC)},
		{time.Hour, 0, time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)},
		{24 * time.Hour, 2 * time.Hour, time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)},
		{7 * time.Millisecond, 3 * time.Millisecond, time.UnixMicro(7000*12345 + 3000).UTC()},
		{time.Second, 0, time.Date(1960, 1, 1, 0, 0, 1, 0, time.UTC)}, // before the epoch
	} {
		s := periodic{c.period, c.phase}
		half := c.period / 2
		// With an early tolerance of half a period, callers up to half a
		// period early or late agree.
		for _, skew := range []time.Duration{0, time.Microsecond, -time.Microsecond, half - time.Microsecond,
			-half + time.Microsecond, -half, half / 3, -half / 3} {
			if got, _ := due(s, c.at.Add(skew), half); !got.Equal(c.at) {
				t.Errorf("every %v phase %v: %v off %v gives %v", c.period, c.phase, skew, c.at, got)
			}
		}
		if got, _ := due(s, c.at.Add(half), half); !got.Equal(c.at.Add(c.period)) {
			t.Errorf("every %v: a tie goes to the later occurrence, not %v", c.period, got)
		}
		// With a small one, a caller more than it early gets nothing,
		// and learns the next occurrence; one less early gets it early.
		early := c.period / 10
		if got, next := due(s, c.at.Add(-early-time.Microsecond), early); !got.IsZero() || !next.Equal(c.at) {
			t.Errorf("every %v: %v before %v gives %v (next %v), want none", c.period, early, c.at, got, next)
		}
		if got, _ := due(s, c.at.Add(-early), early); !got.Equal(c.at) {
			t.Errorf("every %v: %v early gives %v", c.period, early, got)
		}
	}
}

func TestKeysSortByTime(t *testing.T) {
	ts := []time.Time{
		time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 1, 500000000, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 10, 1000, time.UTC),
	}
	for i := 1; i < len(ts); i++ {
		a, b := At(ts[i-1]).key, At(ts[i]).key
		if a >= b {
			t.Errorf("key %q does not sort before %q", a, b)
		}
	}
	if k := At(time.Date(2026, 1, 1, 3, 0, 0, 1999, time.FixedZone("X", 3600))).key; k != "2026-01-01T02:00:00.000001Z" {
		t.Errorf("At: %q", k)
	}
}

func TestLeaseNameFits(t *testing.T) {
	job, key := "j", strings.Repeat("x", 300)
	if n := leaseName(job, key); len(n) > 255 || n[:5] != "run/#" {
		t.Errorf("lease name %q", n)
	}
	if n := leaseName("j", "k"); n != "run/j/k" {
		t.Errorf("lease name %q", n)
	}
	if leaseName(job, key) == leaseName(job, key+"y") {
		t.Error("two long keys share a lease name")
	}
}

func TestTruncateAtCharacters(t *testing.T) {
	if s := truncate("aé", 2); s != "a" {
		t.Errorf("%q", s)
	}
	if s := truncate("abc", 3); s != "abc" {
		t.Errorf("%q", s)
	}
}
