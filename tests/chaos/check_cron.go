package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// CronJob is an entry of a cron scenario's crontab, as CheckCron knows it:
// its schedule and its policies.
type CronJob struct {
	Name string
	// Every is the period of an "@every" entry (counted from the Unix
	// epoch); zero for an entry "*/Step * * * *" in the time zone Zone.
	Every time.Duration
	Step  int
	Zone  *time.Location
	// Overlap and CatchUp are the entry's policies: "skip", "allow" or
	// "replace"; "skip", "latest" or "all".
	Overlap, CatchUp string
	// Window is the entry's catch-up window.
	Window time.Duration
	// PausedAt is when the job was paused (on the database's clock), to
	// stay so; zero if it never was.
	PausedAt time.Time
}

// PauseSlack is how long after a job's pause CheckCron lets a Run begun
// before it still claim an occurrence: one due by then, or taken early
// (Early), by a Run that read the job's row before the pause was
// committed, with room for a pause statement that waited on a row lock.
const PauseSlack = 30 * time.Second

// Early is how long before an occurrence is due a Run may take it
// (ledger.Occurrence.Early's default).
const Early = 5 * time.Second

// paused reports whether j's occurrence t is one that no Run may claim:
// due well after the pause.
func (j CronJob) paused(t time.Time) bool {
	return !j.PausedAt.IsZero() && t.After(j.PausedAt.Add(PauseSlack))
}

// fits reports whether t is an occurrence of j's schedule.
func (j CronJob) fits(t time.Time) bool {
	if j.Every > 0 {
		return t.UnixNano()%int64(j.Every) == 0
	}
	l := t.In(j.Zone)
	return l.Second() == 0 && l.Nanosecond() == 0 && l.Minute()%j.Step == 0
}

// next returns j's first occurrence after t.
func (j CronJob) next(t time.Time) time.Time {
	if j.Every > 0 {
		return t.Truncate(j.Every).Add(j.Every)
	}
	for t = t.Truncate(time.Minute).Add(time.Minute); !j.fits(t); t = t.Add(time.Minute) {
	}
	return t
}

// occurrences returns j's occurrences strictly between from and to.
func (j CronJob) occurrences(from, to time.Time) []time.Time {
	step := j.Every
	if step == 0 {
		step = time.Minute
	}
	var ts []time.Time
	for t := from.Truncate(step); t.Before(to); t = t.Add(step) {
		if t.After(from) && j.fits(t) {
			ts = append(ts, t)
		}
	}
	return ts
}

// CronAttempt is a row of the run ledger that a cron scenario left: one
// attempt of an occurrence of one of its jobs. Its times are the
// database's.
type CronAttempt struct {
	Job        string
	Occurrence string
	Attempt    int
	State      string // running, succeeded, failed, abandoned, skipped, replaced
	Owner      string
	Token      int64
	StartedAt  time.Time
	FinishedAt time.Time
}

// CronEffect is a line that a job's command wrote: that it began its
// work under the attempt of token Token, or (End) that it finished it.
// Its time is the host's.
type CronEffect struct {
	Job        string
	Occurrence string
	Token      int64
	End        bool
	At         time.Time
}

// CronMissed is an occurrence that Ledger.Missed reported at the end.
type CronMissed struct {
	Job, Occurrence string
}

// Span is a span of time: in CronHistory.Down, one during which no
// replica of the scenario was up.
type Span struct {
	From, To time.Time
}

// CronHistory is what a cron scenario leaves for CheckCron. The host and
// the database servers of the test share one clock.
type CronHistory struct {
	Jobs     []CronJob
	Attempts []CronAttempt
	Effects  []CronEffect
	Missed   []CronMissed
	Down     []Span
	// End is when the scenario ended: Missed was read after it.
	End time.Time
	// TimeFormat parses the occurrences (ledger.TimeFormat), and
	// ManualPrefix begins those of manual ones (ledger.ManualPrefix).
	TimeFormat, ManualPrefix string
}

// CheckCron returns the violations of the distributed crontab's model in
// h, none of which depends on how fast the machine is:
//
//   - an attempt of a job not in the table, or of an occurrence that is
//     not one of its job's schedule (in its time zone) nor manual;
//   - an occurrence with more than one succeeded attempt, attempts not
//     numbered 1, 2, 3…, tokens not growing, or an attempt after one
//     running, succeeded, skipped or replaced;
//   - a succeeded attempt whose command did not finish its work under
//     the attempt's token, or a command that worked under a token no
//     attempt of its occurrence has (or a skipped one);
//   - an occurrence both missed and attempted;
//   - an occurrence of a paused job due more than PauseSlack after the
//     pause with an attempt, or one due after the pause reported missed;
//   - overlap: a skipped attempt outside a job of policy skip, a replaced
//     one outside replace; under skip and replace, two succeeded
//     scheduled occurrences whose commands' work overlapped (each holds
//     the job's lease from before its command starts until after it ends:
//     the later grant would have fenced the earlier's outcome);
//   - catch-up, for the occurrences due while no replica was up (Down):
//     under skip, one claimed after the span began (before it, a live
//     replica may claim one early), or one not attempted nor reported
//     missed although its next
//     occurrence passed before the end; under latest, one claimed after
//     the span began other than the last of them, or an earlier one not
//     attempted nor reported missed; under
//     all, once an occurrence after the span was claimed (its Run caught
//     up first, the window before its due one), one within the window
//     before the claim's time (plus Early) not attempted.
func CheckCron(h CronHistory) []string {
	var v []string
	jobs := map[string]CronJob{}
	for _, j := range h.Jobs {
		jobs[j.Name] = j
	}
	type key struct{ job, occ string }
	byOcc := map[key][]CronAttempt{}
	for _, a := range h.Attempts {
		j, ok := jobs[a.Job]
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("%s %s: an attempt of a job not in the table", a.Job, a.Occurrence))
			continue
		case strings.HasPrefix(a.Occurrence, h.ManualPrefix):
		default:
			t, err := time.Parse(h.TimeFormat, a.Occurrence)
			if err != nil || !j.fits(t) {
				v = append(v, fmt.Sprintf("%s %s: not an occurrence of the job's schedule", a.Job, a.Occurrence))
			}
		}
		byOcc[key{a.Job, a.Occurrence}] = append(byOcc[key{a.Job, a.Occurrence}], a)
	}
	keys := make([]key, 0, len(byOcc))
	for k := range byOcc {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].job < keys[j].job || keys[i].job == keys[j].job && keys[i].occ < keys[j].occ
	})

	// Each command's work, by attempt token: from its first line to its
	// end line (zero if it never wrote one).
	type work struct{ from, to time.Time }
	works := map[key]map[int64]*work{}
	for _, e := range h.Effects {
		k := key{e.Job, e.Occurrence}
		if works[k] == nil {
			works[k] = map[int64]*work{}
		}
		w := works[k][e.Token]
		if w == nil {
			w = &work{}
			works[k][e.Token] = w
		}
		if e.End {
			w.to = e.At
		} else {
			w.from = e.At
		}
	}

	for _, k := range keys {
		as := byOcc[k]
		sort.Slice(as, func(i, j int) bool { return as[i].Attempt < as[j].Attempt })
		succeeded := 0
		for i, a := range as {
			if a.Attempt != i+1 {
				v = append(v, fmt.Sprintf("%s %s: attempt %d where %d was due", k.job, k.occ, a.Attempt, i+1))
			}
			if i > 0 && a.Token <= as[i-1].Token {
				v = append(v, fmt.Sprintf("%s %s: attempt %d has token %d, not above attempt %d's %d",
					k.job, k.occ, a.Attempt, a.Token, as[i-1].Attempt, as[i-1].Token))
			}
			if i < len(as)-1 && slices.Contains([]string{"running", "succeeded", "skipped", "replaced"}, a.State) {
				v = append(v, fmt.Sprintf("%s %s: attempt %d is %s, yet attempt %d followed", k.job, k.occ, a.Attempt, a.State, as[i+1].Attempt))
			}
			switch a.State {
			case "succeeded":
				succeeded++
				if w := works[k][a.Token]; w == nil || w.to.IsZero() {
					v = append(v, fmt.Sprintf("%s %s: attempt %d (token %d) succeeded, but its command did not finish its work",
						k.job, k.occ, a.Attempt, a.Token))
				}
			case "skipped":
				if jobs[k.job].Overlap != "skip" {
					v = append(v, fmt.Sprintf("%s %s: skipped for overlap under policy %s", k.job, k.occ, jobs[k.job].Overlap))
				}
			case "replaced":
				if jobs[k.job].Overlap != "replace" {
					v = append(v, fmt.Sprintf("%s %s: replaced under policy %s", k.job, k.occ, jobs[k.job].Overlap))
				}
			}
		}
		if succeeded > 1 {
			v = append(v, fmt.Sprintf("%s %s: %d attempts succeeded", k.job, k.occ, succeeded))
		}
	}
	for k, ws := range works {
		for tok := range ws {
			found := false
			for _, a := range byOcc[k] {
				found = found || (a.Token == tok && a.State != "skipped")
			}
			if !found {
				v = append(v, fmt.Sprintf("%s %s: a command worked under token %d, which no attempt of the occurrence ran with", k.job, k.occ, tok))
			}
		}
	}

	// Under skip and replace, the succeeded scheduled occurrences' work,
	// job by job, in the order it began, each must end before the next
	// begins.
	type done struct {
		occ string
		w   work
	}
	byJob := map[string][]done{}
	for _, k := range keys {
		if p := jobs[k.job].Overlap; (p != "skip" && p != "replace") || strings.HasPrefix(k.occ, h.ManualPrefix) {
			continue
		}
		for _, a := range byOcc[k] {
			if w := works[k][a.Token]; a.State == "succeeded" && w != nil && !w.from.IsZero() && !w.to.IsZero() {
				byJob[k.job] = append(byJob[k.job], done{k.occ, *w})
			}
		}
	}
	for job, ds := range byJob {
		sort.Slice(ds, func(i, j int) bool { return ds[i].w.from.Before(ds[j].w.from) })
		for i := 1; i < len(ds); i++ {
			if ds[i].w.from.Before(ds[i-1].w.to) {
				v = append(v, fmt.Sprintf("%s %s: its command worked from %s while %s's worked (until %s), both succeeded under overlap %s",
					job, ds[i].occ, ds[i].w.from.Format(time.StampMilli), ds[i-1].occ, ds[i-1].w.to.Format(time.StampMilli), jobs[job].Overlap))
			}
		}
	}

	missed := map[key]bool{}
	for _, m := range h.Missed {
		missed[key{m.Job, m.Occurrence}] = true
		if as := byOcc[key{m.Job, m.Occurrence}]; len(as) > 0 {
			v = append(v, fmt.Sprintf("%s %s: reported missed, but has %d attempts (the last %s)", m.Job, m.Occurrence, len(as), as[len(as)-1].State))
		}
		if j := jobs[m.Job]; !j.PausedAt.IsZero() {
			if t, err := time.Parse(h.TimeFormat, m.Occurrence); err == nil && !t.Before(j.PausedAt) {
				v = append(v, fmt.Sprintf("%s %s: reported missed, although due while the job was paused", m.Job, m.Occurrence))
			}
		}
	}
	for _, k := range keys {
		j := jobs[k.job]
		if t, err := time.Parse(h.TimeFormat, k.occ); err == nil && j.paused(t) {
			v = append(v, fmt.Sprintf("%s %s: the job was paused at %s, yet the occurrence has %d attempts",
				k.job, k.occ, j.PausedAt.UTC().Format(h.TimeFormat), len(byOcc[k])))
		}
	}

	for _, d := range h.Down {
		for _, j := range h.Jobs {
			to := d.To
			if !j.PausedAt.IsZero() && j.PausedAt.Before(to) {
				to = j.PausedAt
			}
			ts := j.occurrences(d.From, to)
			// The first occurrence after the span that a Run claimed, and
			// when: that Run caught up first (its catch-up ended without
			// an error), the missed occurrences within the window before
			// its due one, which was due by then (or within Early).
			var after, claimed time.Time
			for _, a := range h.Attempts {
				t, err := time.Parse(h.TimeFormat, a.Occurrence)
				if a.Job != j.Name || err != nil || t.Before(d.To) {
					continue
				}
				if after.IsZero() || t.Before(after) || t.Equal(after) && a.StartedAt.Before(claimed) {
					after, claimed = t, a.StartedAt
				}
			}
			for i, t := range ts {
				k := key{j.Name, t.UTC().Format(h.TimeFormat)}
				ran := len(byOcc[k]) > 0
				// A live replica may have claimed t early, before the span
				// (Occurrence.Early): only a claim after it is a catch-up.
				caught := false
				for _, a := range byOcc[k] {
					caught = caught || !a.StartedAt.Before(d.From)
				}
				// Missed reports t once its next occurrence has passed.
				reported := j.next(t).Before(h.End)
				switch {
				case j.CatchUp == "all" && !ran && !after.IsZero() && !t.Before(claimed.Add(Early-j.Window)):
					v = append(v, fmt.Sprintf("%s %s: due while no replica was up, not caught up under catch-up all (before %s)",
						k.job, k.occ, after.UTC().Format(h.TimeFormat)))
				case j.CatchUp == "latest" && caught && i < len(ts)-1:
					v = append(v, fmt.Sprintf("%s %s: due while no replica was up (%s to %s), caught up under catch-up latest (claimed at %s), but %s was due after it",
						k.job, k.occ, d.From.UTC().Format(h.TimeFormat), d.To.UTC().Format(h.TimeFormat),
						byOcc[k][0].StartedAt.UTC().Format(h.TimeFormat), ts[len(ts)-1].UTC().Format(h.TimeFormat)))
				case (j.CatchUp == "skip" || j.CatchUp == "") && caught:
					v = append(v, fmt.Sprintf("%s %s: due while no replica was up, run under catch-up skip", k.job, k.occ))
				case (j.CatchUp == "skip" || j.CatchUp == "" || j.CatchUp == "latest" && i < len(ts)-1) && !ran && !missed[k] && reported:
					v = append(v, fmt.Sprintf("%s %s: due while no replica was up, not run, not reported missed", k.job, k.occ))
				}
			}
		}
	}
	return v
}
