package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
)

// mustCron parses expr in zone, or fails t.
func mustCron(t *testing.T, expr, zone string) *crontab {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCron(expr, loc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// occurrences lists c's occurrences in [from, to), as RFC 3339 in c's zone.
func occurrences(c *crontab, from, to time.Time) []string {
	var got []string
	for at := c.after(from.Add(-time.Nanosecond)); !at.IsZero() && at.Before(to); at = c.after(at) {
		got = append(got, at.In(c.loc).Format(time.RFC3339))
	}
	return got
}

func TestCronDaylightSaving(t *testing.T) {
	t.Parallel()
	berlin := func(s string) time.Time {
		loc, _ := time.LoadLocation("Europe/Berlin")
		at, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	for _, c := range []struct {
		name, expr string
		from, to   string
		want       []string
	}{{
		// 2026-03-29: 02:00 CET becomes 03:00 CEST. The skipped 02:30
		// runs once, at the end of the gap.
		name: "spring forward, daily 02:30", expr: "30 2 * * *", from: "2026-03-28 00:00", to: "2026-03-31 00:00",
		want: []string{"2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"},
	}, {
		// The skipped 02:30 and the real 03:00 are one occurrence.
		name: "spring forward, 02:30 and 03:00", expr: "0,30 2,3 * * *", from: "2026-03-29 00:00", to: "2026-03-29 04:00",
		want: []string{"2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"},
	}, {
		// 2026-10-25: 03:00 CEST becomes 02:00 CET. The repeated 02:30
		// runs once, at its first (summer time) instant.
		name: "autumn back, daily 02:30", expr: "30 2 * * *", from: "2026-10-24 00:00", to: "2026-10-27 00:00",
		want: []string{"2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"},
	}, {
		// Hourly: one occurrence per wall-clock hour, so 24 on the
		// autumn day of 25 hours: the repeated 02:00 once.
		name: "autumn back, hourly", expr: "@hourly", from: "2026-10-25 01:00", to: "2026-10-25 04:00",
		want: []string{"2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T03:00:00+01:00"},
	}, {
		name: "seconds field", expr: "*/20 0 0 1 1 *", from: "2027-01-01 00:00", to: "2027-01-01 00:01",
		want: []string{"2027-01-01T00:00:00+01:00", "2027-01-01T00:00:20+01:00", "2027-01-01T00:00:40+01:00"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			cr := mustCron(t, c.expr, "Europe/Berlin")
			got := occurrences(cr, berlin(c.from), berlin(c.to))
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Fatalf("%s from %s: got %v, want %v", c.expr, c.from, got, c.want)
			}
			// atOrBefore agrees with after, at and between occurrences.
			for i, w := range c.want {
				at, _ := time.Parse(time.RFC3339, w)
				if got := cr.atOrBefore(at); !got.Equal(at) {
					t.Errorf("atOrBefore(%s) = %v", w, got)
				}
				if i > 0 {
					prev, _ := time.Parse(time.RFC3339, c.want[i-1])
					if got := cr.atOrBefore(at.Add(-time.Second)); !got.Equal(prev) {
						t.Errorf("atOrBefore(%s - 1s) = %v, want %s", w, got, c.want[i-1])
					}
				}
			}
		})
	}
}

func TestCronRefusals(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"61 * * * *":          `minute field "61"`,
		"0 25 * * *":          `hour field "25"`,
		"0 0 * 13 *":          `month field "13"`,
		"0 0 * * mon-xyz":     `day of week field "mon-xyz"`,
		"* * *":               "want 5 fields",
		"@every 5m":           "a fixed period is Every's",
		"CRON_TZ=UTC 0 * * *": "give the time zone apart",
		"0 0 30 2 *":          "no time in the next five years",
	} {
		_, err := parseCron(expr, time.UTC)
		if !errors.Is(err, sqllock.ErrInvalidOptions) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want ErrInvalidOptions naming %s", expr, err, want)
		}
	}
	if _, err := parseCron("@daily", time.Local); !errors.Is(err, sqllock.ErrInvalidOptions) {
		t.Errorf("time.Local: %v", err)
	}
	// A recorded schedule reads back as it was.
	c := mustCron(t, "0 2 * * *", "America/New_York")
	back, err := parseSpec(c.specText())
	if err != nil || back.expr != c.expr || back.loc.String() != "America/New_York" {
		t.Fatalf("parseSpec(%q) = %+v, %v", c.specText(), back, err)
	}
}

func TestBetweenKeepsTheLatest(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []schedule{periodic{time.Minute, 0}, mustCron(t, "* * * * *", "UTC")} {
		ts := between(s, from, from.Add(time.Hour), 10)
		if len(ts) != 10 || !ts[9].Equal(from.Add(time.Hour)) || !ts[0].Equal(from.Add(51*time.Minute)) {
			t.Errorf("%T: %v", s, ts)
		}
		if ts := between(s, from, from.Add(3*time.Minute), 10); len(ts) != 4 || !ts[0].Equal(from) {
			t.Errorf("%T: %v", s, ts)
		}
	}
}

// Next is the schedule's next time after t, by the daylight-saving rule,
// for Every and Cron alike, and the zero time for what has no schedule.
func TestOccurrenceNext(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	spring := time.Date(2025, 3, 30, 0, 0, 0, 0, time.UTC) // clocks go 02:00 -> 03:00 CET -> CEST
	for _, c := range []struct {
		occ      Occurrence
		from     time.Time
		want     time.Time
		describe string
	}{
		{Cron("30 2 * * *", berlin), spring, time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC), "02:30 on the spring day: the end of the gap, 03:00 CEST"},
		{Cron("30 2 * * *", berlin), time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC), time.Date(2025, 3, 31, 0, 30, 0, 0, time.UTC), "then the next day's 02:30 CEST"},
		{Cron("@hourly", nil), time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 11, 0, 0, 0, time.UTC), "strictly after t"},
		{Every(10 * time.Second).Phase(time.Second), time.Date(2025, 1, 1, 0, 0, 5, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 11, 0, time.UTC), "a period plus its phase"},
		{Key("k"), spring, time.Time{}, "a key has no schedule"},
		{Manual(), spring, time.Time{}, "nor has a manual occurrence"},
		{Cron("0 25 * * *", nil), spring, time.Time{}, "nor an invalid expression"},
	} {
		if got := c.occ.Next(c.from); !got.Equal(c.want) {
			t.Errorf("%s: %v.Next(%v) = %v, want %v", c.describe, c.occ, c.from, got, c.want)
		}
	}
}
