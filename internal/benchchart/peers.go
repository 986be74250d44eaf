package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// series is one line of a chart: a system's hand-off latency, the median
// p50 of its rounds at each waiter count (-peers), or a database's time per
// acquire+release at each held-lock count (-scale).
type series struct {
	system string
	y      map[int]float64 // x (waiters, held locks) -> value
}

var peerLine = regexp.MustCompile(`^BenchmarkPeerHandoff/system=([^/\s]+)/waiters=(\d+)/round=\d+\s`)

// parsePeers reads the hand-off lines of bench/peers and returns a series
// per system, in the order of their first line, and the waiter counts seen.
func parsePeers(r io.Reader) ([]*series, []int, error) {
	var (
		order   []*series
		byName  = map[string]*series{}
		samples = map[string]map[int][]float64{}
		waiters []int
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := peerLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		w, _ := strconv.Atoi(m[2])
		f := strings.Fields(sc.Text())
		for i := 2; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || f[i+1] != "p50-ms" || math.IsNaN(v) {
				continue
			}
			s := byName[m[1]]
			if s == nil {
				s = &series{system: m[1], y: map[int]float64{}}
				byName[m[1]] = s
				samples[m[1]] = map[int][]float64{}
				order = append(order, s)
			}
			samples[m[1]][w] = append(samples[m[1]][w], v)
			if !slices.Contains(waiters, w) {
				waiters = append(waiters, w)
			}
		}
	}
	for _, s := range order {
		for w, vs := range samples[s.system] {
			slices.Sort(vs)
			s.y[w] = vs[len(vs)/2]
		}
	}
	slices.Sort(waiters)
	return order, waiters, sc.Err()
}

// palette colours the series, in order.
var palette = []string{"#d62728", "#ff7f0e", "#8c564b", "#2ca02c", "#17becf", "#1f6fb2", "#9467bd", "#e377c2", "#7f7f7f", "#bcbd22"}

// renderPeers draws p50 hand-off latency (log scale) against the number of
// waiting processes, a line per system.
func renderPeers(w io.Writer, ss []*series, waiters []int) {
	renderLines(w, "Hand-off between processes: p50 ms (log scale, lower is better) against waiting processes",
		"waiting processes", ss, waiters)
}

// renderLines draws each series' values (log scale) against xs, evenly
// spaced, a line per series, under title.
func renderLines(w io.Writer, title, xLabel string, ss []*series, waiters []int) {
	const (
		left, right, top, bottom = 70, 190, 50, 50
		width, height            = 900, 480
	)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.y {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	x := func(i int) float64 {
		if len(waiters) == 1 {
			return float64(left) + plotW/2
		}
		return float64(left) + plotW*float64(i)/float64(len(waiters)-1)
	}
	y := func(v float64) float64 {
		return float64(top) + plotH*(1-(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo)))
	}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", title)
	for v := lo; v <= hi*1.0001; v *= 10 {
		fmt.Fprintf(w, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n",
			left, width-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for i, n := range waiters {
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(i), height-bottom+18, n)
	}
	fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(left)+plotW/2, height-12, xLabel)
	for k, s := range ss {
		colour := palette[k%len(palette)]
		var pts []string
		for i, n := range waiters {
			if v, ok := s.y[n]; ok && v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(i), y(v), colour)
			}
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), colour)
		ly := top + 10 + 20*k
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			width-right+16, ly-4, colour, width-right+36, ly+1, s.system)
	}
	fmt.Fprintln(w, `</svg>`)
}
