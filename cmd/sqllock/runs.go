package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/ledger"
)

// runsFlags is "sqllock runs [NAME]": the recent attempts of the run
// ledger's occurrences, and the occurrences no replica claimed.
func runsFlags(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout io.Writer) error {
	dsn, schema := dsnFlag(fs), schemaFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON object: {\"runs\": [...], \"missed\": [...]}, times in RFC 3339, durations in milliseconds")
	watch := durationFlag(fs, "watch", 0, "show the runs again every `SECONDS` until interrupted (0: once)")
	limit := fs.Int("limit", 20, "show the latest `N` attempts")
	grace := durationFlag(fs, "grace", 0, "an occurrence of a job run with --every is missed when no replica claimed it within `SECONDS` (or a duration) of its time (0: one period of the job)")
	return func(ctx context.Context, args []string, stdout io.Writer) error {
		var job string
		switch len(args) {
		case 0:
		case 1:
			job = args[0]
			if err := sqllock.ValidateName(job); err != nil {
				return usageError{msg: err.Error()}
			}
		default:
			return usageError{msg: "runs takes at most one job name"}
		}
		switch {
		case *watch < 0 || *grace < 0:
			return usageError{msg: "--watch and --grace must not be negative"}
		case *limit <= 0:
			return usageError{msg: "--limit must be positive"}
		}
		t, err := openReady(ctx, *dsn, *schema)
		if err != nil {
			return err
		}
		defer t.Close()
		l, err := ledger.New(t.d, ledger.Options{})
		if errors.Is(err, sqllock.ErrUnsupported) {
			return usageError{msg: err.Error()}
		}
		if err != nil {
			return err
		}
		show := func(ctx context.Context, stamped bool) error {
			v, err := readRuns(ctx, l, job, *limit, *grace)
			if err != nil {
				return t.fail(err)
			}
			if *asJSON {
				return v.writeJSON(stdout, !stamped)
			}
			if stamped {
				fmt.Fprintf(stdout, "%s  %s\n\n", time.Now().Format("2006-01-02 15:04:05 MST"), t.dsn)
			}
			return v.writeTable(stdout)
		}
		if *watch == 0 {
			return show(ctx, false)
		}
		return watchView(ctx, *watch, stdout, !*asJSON, func(ctx context.Context) error { return show(ctx, true) })
	}
}

// runRow is one attempt of an occurrence, as sqllock runs shows it.
type runRow struct {
	Job        string     `json:"job"`
	Occurrence string     `json:"occurrence"`
	Attempt    int        `json:"attempt"`
	State      string     `json:"state"` // running, succeeded, failed or abandoned
	Owner      string     `json:"owner"`
	Token      int64      `json:"token"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"` // nil while it runs
	// DurationMS runs from the start to the end, or to now while it runs.
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
}

// missedRow is an occurrence no replica claimed within the grace time.
type missedRow struct {
	Job        string    `json:"job"`
	Occurrence string    `json:"occurrence"`
	Due        time.Time `json:"due"` // the occurrence's time
}

// runsView is what sqllock runs shows.
type runsView struct {
	Runs   []runRow    `json:"runs"`
	Missed []missedRow `json:"missed"`
	grace  time.Duration
}

// readRuns reads the latest limit attempts of job ("": every job) and the
// occurrences missed beyond grace.
func readRuns(ctx context.Context, l *ledger.Ledger, job string, limit int, grace time.Duration) (runsView, error) {
	v := runsView{Runs: []runRow{}, Missed: []missedRow{}, grace: grace}
	infos, err := l.Runs(ctx, job, limit)
	if err != nil {
		return v, err
	}
	now := time.Now()
	for _, in := range infos {
		row := runRow{Job: in.Job, Occurrence: in.Occurrence, Attempt: in.Attempt, State: string(in.State),
			Owner: in.Owner, Token: in.Token, StartedAt: in.StartedAt, Error: in.Err}
		end := now
		if !in.FinishedAt.IsZero() {
			end = in.FinishedAt
			row.FinishedAt = &in.FinishedAt
		}
		row.DurationMS = max(end.Sub(in.StartedAt), 0).Milliseconds()
		v.Runs = append(v.Runs, row)
	}
	missed, err := l.Missed(ctx, job, grace)
	if err != nil {
		return v, err
	}
	for _, m := range missed {
		v.Missed = append(v.Missed, missedRow{Job: m.Job, Occurrence: m.Occurrence, Due: m.At})
	}
	return v, nil
}

// writeJSON writes v as one JSON object, indented unless for --watch.
func (v runsView) writeJSON(w io.Writer, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// writeTable writes v as tables: the attempts, then the missed
// occurrences under a MISSED heading.
func (v runsView) writeTable(w io.Writer) error {
	zone, _ := time.Now().Zone()
	if len(v.Runs) == 0 {
		fmt.Fprintln(w, "no runs recorded")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "JOB\tOCCURRENCE\tATTEMPT\tSTATE\tOWNER\tTOKEN\tSTARTED (%s)\tDURATION\tERROR\n", zone)
		for _, r := range v.Runs {
			d := (time.Duration(r.DurationMS) * time.Millisecond).String()
			if r.FinishedAt == nil {
				d += " so far"
			}
			errText := "-"
			if r.Error != "" {
				errText = cell(r.Error)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.Job), cell(r.Occurrence), r.Attempt, r.State,
				cell(r.Owner), strconv.FormatInt(r.Token, 10), r.StartedAt.Local().Format("2006-01-02 15:04:05"), d, errText)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(v.Missed) == 0 {
		return nil
	}
	within := "within a period of their time"
	if v.grace > 0 {
		within = "within --grace " + v.grace.String()
	}
	fmt.Fprintf(w, "\nMISSED: %s no replica claimed %s\n", count(len(v.Missed), "occurrence", "occurrences"), within)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "JOB\tOCCURRENCE\tDUE (%s)\n", zone)
	for _, m := range v.Missed {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(m.Job), cell(m.Occurrence), m.Due.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}
