package chaos

import (
	"strings"
	"testing"
	"time"
)

const cronFormat = "2006-01-02T15:04:05.000000Z"

// cronBase is a history that CheckCron accepts: a job every 2 s under
// skip, its occurrence 10:00:00 succeeded on the second attempt after the
// first one's runner died, 10:00:02 skipped for overlap, 10:00:04 missed,
// a manual occurrence succeeded; a job paused at 10:00:00 that ran
// (a Run begun before the pause) an occurrence a moment after it, and a
// manual one.
func cronBase() CronHistory {
	at := func(s string) time.Time { t, _ := time.Parse(time.TimeOnly, s); return t.AddDate(2026, 11, 1) }
	occ := func(s string) string { return at(s).Format(cronFormat) }
	return CronHistory{
		Jobs: []CronJob{
			{Name: "tick", Every: 2 * time.Second, Overlap: "skip", CatchUp: "skip"},
			{Name: "off", Every: time.Second, PausedAt: at("10:00:00")},
		},
		Attempts: []CronAttempt{
			{Job: "tick", Occurrence: occ("10:00:00"), Attempt: 1, State: "abandoned", Token: 3, StartedAt: at("10:00:00")},
			{Job: "tick", Occurrence: occ("10:00:00"), Attempt: 2, State: "succeeded", Token: 5, StartedAt: at("10:00:01"), FinishedAt: at("10:00:03")},
			{Job: "tick", Occurrence: occ("10:00:02"), Attempt: 1, State: "skipped", Token: 4, StartedAt: at("10:00:02"), FinishedAt: at("10:00:02")},
			{Job: "tick", Occurrence: "manual/" + occ("10:00:05"), Attempt: 1, State: "succeeded", Token: 6, StartedAt: at("10:00:05"), FinishedAt: at("10:00:06")},
			{Job: "off", Occurrence: occ("10:00:01"), Attempt: 1, State: "failed", Token: 2, StartedAt: at("10:00:01")},
			{Job: "off", Occurrence: "manual/" + occ("10:00:30"), Attempt: 1, State: "failed", Token: 11, StartedAt: at("10:00:30")},
		},
		Effects: []CronEffect{
			{Job: "tick", Occurrence: occ("10:00:00"), Token: 3, At: at("10:00:00")},
			{Job: "tick", Occurrence: occ("10:00:00"), Token: 5, At: at("10:00:01")},
			{Job: "tick", Occurrence: occ("10:00:00"), Token: 5, End: true, At: at("10:00:02")},
			{Job: "tick", Occurrence: "manual/" + occ("10:00:05"), Token: 6, At: at("10:00:05")},
			{Job: "tick", Occurrence: "manual/" + occ("10:00:05"), Token: 6, End: true, At: at("10:00:06")},
		},
		Missed:       []CronMissed{{Job: "tick", Occurrence: occ("10:00:04")}},
		End:          at("10:01:00"),
		TimeFormat:   cronFormat,
		ManualPrefix: "manual/",
	}
}

func TestCheckCron(t *testing.T) {
	at := func(s string) time.Time { t, _ := time.Parse(time.TimeOnly, s); return t.AddDate(2026, 11, 1) }
	occ := func(s string) string { return at(s).Format(cronFormat) }
	kathmandu, err := time.LoadLocation("Asia/Kathmandu")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		change func(h *CronHistory)
		want   string // a violation holding this; "" for none
	}{
		{"accepted", func(h *CronHistory) {}, ""},
		{"succeeded twice", func(h *CronHistory) {
			h.Attempts[0].State = "succeeded"
			h.Effects = append(h.Effects, CronEffect{Job: "tick", Occurrence: occ("10:00:00"), Token: 3, End: true, At: at("10:00:01")})
		}, "2 attempts succeeded"},
		{"token not growing", func(h *CronHistory) { h.Attempts[1].Token = 2 }, "not above attempt 1's 3"},
		{"attempts numbered wrong", func(h *CronHistory) { h.Attempts[1].Attempt = 3 }, "attempt 3 where 2 was due"},
		{"running then another", func(h *CronHistory) { h.Attempts[0].State = "running" }, "attempt 1 is running, yet attempt 2 followed"},
		{"an occurrence off the schedule", func(h *CronHistory) {
			h.Attempts[2].Occurrence = occ("10:00:03")
		}, "not an occurrence of the job's schedule"},
		{"an unknown job", func(h *CronHistory) { h.Attempts[2].Job = "who" }, "a job not in the table"},
		{"success without the command's end", func(h *CronHistory) { h.Effects = h.Effects[:2] }, "its command did not finish its work"},
		{"a command under no attempt's token", func(h *CronHistory) {
			h.Effects = append(h.Effects, CronEffect{Job: "tick", Occurrence: occ("10:00:02"), Token: 4, At: at("10:00:02")})
		}, "no attempt of the occurrence ran with"},
		{"missed and run", func(h *CronHistory) {
			h.Missed = append(h.Missed, CronMissed{Job: "tick", Occurrence: occ("10:00:02")})
		}, "reported missed, but has 1 attempts"},
		{"a paused job ran", func(h *CronHistory) {
			h.Attempts = append(h.Attempts, CronAttempt{Job: "off", Occurrence: occ("10:00:31"), Attempt: 1, State: "failed", Token: 9})
		}, "the job was paused at " + occ("10:00:00") + ", yet the occurrence has 1 attempts"},
		{"a paused job missed", func(h *CronHistory) {
			h.Missed = append(h.Missed, CronMissed{Job: "off", Occurrence: occ("10:00:07")})
		}, "reported missed, although due while the job was paused"},
		{"skipped under allow", func(h *CronHistory) { h.Jobs[0].Overlap = "allow" }, "skipped for overlap under policy allow"},
		{"replaced under skip", func(h *CronHistory) { h.Attempts[2].State = "replaced" }, "replaced under policy skip"},
		{"two successes' work overlapped under skip", func(h *CronHistory) {
			h.Attempts[2].State, h.Attempts[2].Token = "succeeded", 7
			h.Effects = append(h.Effects,
				CronEffect{Job: "tick", Occurrence: occ("10:00:02"), Token: 7, At: at("10:00:01.5")},
				CronEffect{Job: "tick", Occurrence: occ("10:00:02"), Token: 7, End: true, At: at("10:00:03")})
		}, "both succeeded under overlap skip"},
		{"overlap allowed under allow", func(h *CronHistory) {
			h.Jobs[0].Overlap = "allow"
			h.Attempts[2].State, h.Attempts[2].Token = "succeeded", 7
			h.Effects = append(h.Effects,
				CronEffect{Job: "tick", Occurrence: occ("10:00:02"), Token: 7, At: at("10:00:01.5")},
				CronEffect{Job: "tick", Occurrence: occ("10:00:02"), Token: 7, End: true, At: at("10:00:03")})
		}, ""},
		{"a cron schedule in its zone", func(h *CronHistory) {
			// */2 in Kathmandu (UTC+5:45) falls on odd minutes of UTC.
			h.Jobs = append(h.Jobs, CronJob{Name: "ktm", Step: 2, Zone: kathmandu, Overlap: "allow"})
			h.Attempts = append(h.Attempts, CronAttempt{Job: "ktm", Occurrence: occ("10:01:00"), Attempt: 1, State: "failed", Token: 8})
		}, ""},
		{"a cron schedule off its zone", func(h *CronHistory) {
			h.Jobs = append(h.Jobs, CronJob{Name: "ktm", Step: 2, Zone: kathmandu, Overlap: "allow"})
			h.Attempts = append(h.Attempts, CronAttempt{Job: "ktm", Occurrence: occ("10:02:00"), Attempt: 1, State: "failed", Token: 8})
		}, "not an occurrence of the job's schedule"},
		{"downtime under skip: run", func(h *CronHistory) {
			h.Down = []Span{{at("10:00:01"), at("10:00:03")}}
			h.Missed = nil
		}, "run under catch-up skip"},
		{"downtime under skip: not missed", func(h *CronHistory) {
			h.Down = []Span{{at("10:00:03"), at("10:00:05")}}
			h.Missed = nil
		}, "not run, not reported missed"},
		{"downtime under skip: the end before it is missed", func(h *CronHistory) {
			h.Down = []Span{{at("10:00:03"), at("10:00:05")}}
			h.Missed, h.End = nil, at("10:00:05.5")
		}, ""},
		{"downtime under skip", func(h *CronHistory) { h.Down = []Span{{at("10:00:03"), at("10:00:05")}} }, ""},
		{"downtime under all: not caught up", func(h *CronHistory) {
			h.Jobs[0].CatchUp, h.Jobs[0].Window = "all", time.Minute
			h.Down = []Span{{at("10:00:03"), at("10:00:05")}}
			h.Attempts = append(h.Attempts, CronAttempt{Job: "tick", Occurrence: occ("10:00:06"), Attempt: 1, State: "failed", Token: 10, StartedAt: at("10:00:06")})
		}, "not caught up under catch-up all"},
		{"downtime under all: no run after it", func(h *CronHistory) {
			h.Jobs[0].CatchUp, h.Jobs[0].Window = "all", time.Minute
			h.Down = []Span{{at("10:00:03"), at("10:00:05")}}
		}, ""},
		{"downtime under all: beyond the window", func(h *CronHistory) {
			h.Jobs[0].CatchUp, h.Jobs[0].Window = "all", 6*time.Second
			h.Down = []Span{{at("10:00:03"), at("10:00:05")}}
			h.Attempts = append(h.Attempts, CronAttempt{Job: "tick", Occurrence: occ("10:00:06"), Attempt: 1, State: "failed", Token: 10, StartedAt: at("10:00:06")})
		}, ""},
		{"downtime under latest: an earlier one caught up", func(h *CronHistory) {
			h.Jobs[0].CatchUp = "latest"
			h.Down = []Span{{at("10:00:01"), at("10:00:05")}}
		}, "but " + occ("10:00:04") + " was due after it"},
		{"downtime under latest: an earlier one claimed early, before it", func(h *CronHistory) {
			h.Jobs[0].CatchUp = "latest"
			h.Attempts[2].StartedAt = at("10:00:01")
			h.Down = []Span{{at("10:00:01.5"), at("10:00:05")}}
		}, ""},
		{"downtime under skip: claimed early, before it", func(h *CronHistory) {
			h.Attempts[2].StartedAt = at("10:00:01")
			h.Down = []Span{{at("10:00:01.5"), at("10:00:03")}}
		}, ""},
		{"downtime under latest: an earlier one not missed", func(h *CronHistory) {
			h.Jobs[0].CatchUp = "latest"
			h.Down = []Span{{at("10:00:03"), at("10:00:07")}}
			h.Attempts = append(h.Attempts, CronAttempt{Job: "tick", Occurrence: occ("10:00:06"), Attempt: 1, State: "failed", Token: 10})
			h.Missed = nil
		}, occ("10:00:04") + ": due while no replica was up, not run, not reported missed"},
		{"downtime under latest", func(h *CronHistory) {
			h.Jobs[0].CatchUp = "latest"
			h.Down = []Span{{at("10:00:03"), at("10:00:07")}}
			h.Attempts = append(h.Attempts, CronAttempt{Job: "tick", Occurrence: occ("10:00:06"), Attempt: 1, State: "failed", Token: 10})
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := cronBase()
			c.change(&h)
			v := CheckCron(h)
			switch {
			case c.want == "" && len(v) > 0:
				t.Fatalf("want no violation, got %q", v)
			case c.want != "" && !strings.Contains(strings.Join(v, "\n"), c.want):
				t.Fatalf("want a violation holding %q, got %q", c.want, v)
			}
		})
	}
}
