package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// result is one system's figures in one round: an uncontended run
// (clients > 0) or a hand-off run (waiters > 0).
type result struct {
	system  string
	round   int
	clients int
	waiters int

	opsPerSec float64

	p50, p99 float64 // ms
	perSec   float64 // grants per second
	jain     float64
	stmts    float64 // server statements per grant; -1: not counted
}

type results []result

// result turns a hand-off run into its figures.
func (h handoff) result(system string, waiters, round int, d time.Duration) result {
	return result{
		system: system, round: round, waiters: waiters,
		p50:    percentile(h.latencies, 0.50),
		p99:    percentile(h.latencies, 0.99),
		perSec: float64(h.grants) / d.Seconds(),
		jain:   jain(h.perProc),
	}
}

// percentile is the q-quantile of ds in milliseconds (nearest rank), NaN
// for none.
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return math.NaN()
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return float64(s[max(0, i)]) / float64(time.Millisecond)
}

// jain is Jain's fairness index of the counts: (Σx)² / (n·Σx²), 1 when
// every process got as many grants, 1/n when one got them all; 0 for none.
func jain(counts []int) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sq)
}

// spread is the median of vs with their range, as "m (lo–hi)"; "–" for
// none (NaN values, such as a run without a hand-off, are left out).
func spread(vs []float64, format string) string {
	vs = slices.DeleteFunc(slices.Clone(vs), math.IsNaN)
	if len(vs) == 0 {
		return "–"
	}
	slices.Sort(vs)
	m := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		m = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	if len(vs) == 1 {
		return fmt.Sprintf(format, m)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", m, vs[0], vs[len(vs)-1])
}

// of returns the values f picks from the results matching keep.
func (rs results) of(keep func(result) bool, f func(result) float64) []float64 {
	var out []float64
	for _, r := range rs {
		if keep(r) {
			out = append(out, f(r))
		}
	}
	return out
}

// summary writes the Markdown tables: medians across rounds and ranges.
func summary(w io.Writer, rs results, p params) {
	fmt.Fprintf(w, "\n## Uncontended acquire + release (median of %d rounds, range)\n\n", p.rounds)
	fmt.Fprintln(w, "| system | 1 client, ops/s | ÷ redsync's | 8 clients, ops/s | ÷ redsync's |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, s := range p.systems {
		if !s.uncontended {
			continue
		}
		row := []string{s.name}
		for _, clients := range []int{1, 8} {
			mine := func(r result) bool { return r.system == s.name && r.clients == clients }
			row = append(row, spread(rs.of(mine, func(r result) float64 { return r.opsPerSec }), "%.0f"))
			// The ratio in each round, to redsync's of the same round.
			var ratios []float64
			for _, r := range rs {
				if !mine(r) {
					continue
				}
				ref := rs.of(func(o result) bool { return o.system == "redsync" && o.clients == clients && o.round == r.round },
					func(o result) float64 { return o.opsPerSec })
				if len(ref) == 1 && ref[0] > 0 {
					ratios = append(ratios, r.opsPerSec/ref[0])
				}
			}
			row = append(row, spread(ratios, "%.3f"))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}

	fmt.Fprintf(w, "\n## Hand-off between processes, one waiter per process (median of %d rounds, range)\n\n", p.rounds)
	var head, rule []string
	for _, n := range p.waiters {
		head = append(head, fmt.Sprintf("p50 ms, %d", n), fmt.Sprintf("p99 ms, %d", n))
		rule = append(rule, "---", "---")
	}
	top := p.waiters[len(p.waiters)-1]
	head = append(head, fmt.Sprintf("grants/s, %d", top), fmt.Sprintf("Jain, %d", top))
	rule = append(rule, "---", "---")
	for _, n := range p.waiters {
		head = append(head, fmt.Sprintf("stmts/grant, %d", n))
		rule = append(rule, "---")
	}
	fmt.Fprintf(w, "| system (waiters) | %s |\n| --- | %s |\n", strings.Join(head, " | "), strings.Join(rule, " | "))
	for _, s := range p.systems {
		row := []string{s.name}
		at := func(n int) func(result) bool {
			return func(r result) bool { return r.system == s.name && r.waiters == n }
		}
		for _, n := range p.waiters {
			row = append(row,
				spread(rs.of(at(n), func(r result) float64 { return r.p50 }), "%.2f"),
				spread(rs.of(at(n), func(r result) float64 { return r.p99 }), "%.1f"))
		}
		row = append(row,
			spread(rs.of(at(top), func(r result) float64 { return r.perSec }), "%.0f"),
			spread(rs.of(at(top), func(r result) float64 { return r.jain }), "%.2f"))
		for _, n := range p.waiters {
			if s.kind == "" {
				row = append(row, "–")
				continue
			}
			row = append(row, spread(rs.of(at(n), func(r result) float64 { return r.stmts }), "%.1f"))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}
