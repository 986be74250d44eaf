package main

import (
	"fmt"
	"time"
)

// timeline is a job's history drawn on a time axis, in SVG user units: each
// attempt a bar from its start to its end, coloured by its state; each
// missed occurrence a tick at its time.
type timeline struct {
	W, H   int
	Bars   []timelineBar
	Missed []timelineTick
	Axis   []timelineTick // labels of the time axis
	Label  string         // the picture in words, for screen readers
}

type timelineBar struct {
	X, W  float64
	State string
	Title string
}

type timelineTick struct {
	X      float64
	Title  string
	Anchor string // of an axis label: start, middle or end
}

// timelineOf draws attempts (any order) and missed occurrences up to now,
// w units wide: the axis runs from the earliest of them to now.
func timelineOf(attempts []runRow, missed []missedRow, w int) timeline {
	now := time.Now()
	tl := timeline{W: w, H: 28}
	from := now
	for _, a := range attempts {
		from = minTime(from, a.StartedAt)
	}
	for _, m := range missed {
		from = minTime(from, m.Due)
	}
	if span := now.Sub(from); span < time.Second {
		from = now.Add(-time.Second)
	}
	span := now.Sub(from).Seconds() * 1.02 // a margin at the left
	from = now.Add(-time.Duration(span * float64(time.Second)))
	x := func(t time.Time) float64 { return float64(w) * t.Sub(from).Seconds() / span }
	failed, ok := 0, 0
	for _, a := range attempts {
		end := now
		if a.FinishedAt != nil {
			end = *a.FinishedAt
		}
		x0 := x(a.StartedAt)
		bar := timelineBar{X: x0, W: max(x(end)-x0, 2), State: a.State,
			Title: fmt.Sprintf("%s attempt %d: %s, started %s, %s, by %s (token %d)", a.Occurrence, a.Attempt, a.State,
				a.StartedAt.Local().Format("2006-01-02 15:04:05"), shortDuration(time.Duration(a.DurationMS)*time.Millisecond), a.Owner, a.Token)}
		if a.Error != "" {
			bar.Title += ": " + a.Error
		}
		if bar.X+bar.W > float64(w) {
			bar.W = max(float64(w)-bar.X, 2)
		}
		tl.Bars = append(tl.Bars, bar)
		switch a.State {
		case "succeeded":
			ok++
		case "failed", "abandoned":
			failed++
		}
	}
	for _, m := range missed {
		tl.Missed = append(tl.Missed, timelineTick{X: x(m.Due), Title: "missed: " + m.Occurrence + ", due " + m.Due.Local().Format("2006-01-02 15:04:05")})
	}
	for i := 0; i <= 3; i++ {
		at := from.Add(time.Duration(float64(i) / 3 * span * float64(time.Second)))
		label := "now"
		if i < 3 {
			label = "-" + shortDuration(now.Sub(at).Round(time.Second))
		}
		anchor := map[int]string{0: "start", 3: "end"}[i]
		if anchor == "" {
			anchor = "middle"
		}
		tl.Axis = append(tl.Axis, timelineTick{X: x(at), Title: label, Anchor: anchor})
	}
	tl.Label = fmt.Sprintf("%d attempts since %s: %d succeeded, %d failed or abandoned; %d occurrences missed",
		len(attempts), from.Local().Format("2006-01-02 15:04"), ok, failed, len(missed))
	return tl
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
