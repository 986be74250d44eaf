// Command benchchart turns the output of sqllock's TryAcquireRelease
// benchmarks into an SVG bar chart: for every strategy, database and client
// count, the time per acquire+release of sqllock next to the same
// statements issued raw.
//
//	go test -run '^$' -bench 'TryAcquireRelease' . | go run ./internal/benchchart > chart.svg
//
// Runs repeated with -count are averaged.
//
// With -peers it reads the output of the peer benchmark (bench/peers)
// instead and draws the hand-off latency against the number of waiting
// processes, a line per system (the median of the rounds):
//
//	go run ./internal/benchchart -peers < bench/results-peers.txt > bench/peers.svg
//
// With -scale it reads the output of the scale benchmarks
// (scripts/bench-scale.sh) and draws BenchmarkScaleHeld's time per
// acquire+release against the number of held locks, a line per database
// (the median of runs repeated with -count):
//
//	go run ./internal/benchchart -scale < bench/results-scale.txt > bench/scale.svg
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// bar is one benchmark's averaged result.
type bar struct {
	label     string
	ours, raw float64 // µs/op
	runs      int
	sumRatio  float64
}

var line = regexp.MustCompile(`^Benchmark(\w*)TryAcquireRelease/([^\s]+?)(-\d+)?\s`)

func main() {
	peers := flag.Bool("peers", false, "draw bench/peers' hand-off latency instead")
	scale := flag.Bool("scale", false, "draw the scale benchmarks' time per op against held locks instead")
	flag.Parse()
	if *scale {
		ss, held, err := parseScale(os.Stdin)
		if err == nil && len(ss) == 0 {
			err = fmt.Errorf("no BenchmarkScaleHeld results on standard input")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchchart:", err)
			os.Exit(1)
		}
		renderLines(os.Stdout, "Uncontended TryAcquire+Release: µs (log scale, lower is better) against locks held in the table",
			"held locks", ss, held)
		return
	}
	if *peers {
		ss, waiters, err := parsePeers(os.Stdin)
		if err == nil && len(ss) == 0 {
			err = fmt.Errorf("no BenchmarkPeerHandoff results on standard input")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchchart:", err)
			os.Exit(1)
		}
		renderPeers(os.Stdout, ss, waiters)
		return
	}
	bars, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
	if len(bars) == 0 {
		fmt.Fprintln(os.Stderr, "benchchart: no TryAcquireRelease results on standard input")
		os.Exit(1)
	}
	render(os.Stdout, bars)
}

func parse(r io.Reader) ([]*bar, error) {
	var (
		order []*bar
		byKey = map[string]*bar{}
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		strategy := strings.ToLower(m[1])
		if strategy == "" {
			strategy = "table"
		}
		label := strategy + " " + strings.ReplaceAll(m[2], "/", " ")
		metrics := map[string]float64{}
		f := strings.Fields(sc.Text())
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				metrics[f[i+1]] = v
			}
		}
		ours, okO := metrics["sqllock-ns/op"]
		raw, okR := metrics["raw-ns/op"]
		if !okO || !okR {
			continue
		}
		b := byKey[label]
		if b == nil {
			b = &bar{label: label}
			byKey[label] = b
			order = append(order, b)
		}
		b.ours += ours / 1000
		b.raw += raw / 1000
		b.sumRatio += metrics["ratio"]
		b.runs++
	}
	for _, b := range order {
		b.ours /= float64(b.runs)
		b.raw /= float64(b.runs)
	}
	return order, sc.Err()
}

// render draws horizontal grouped bars: raw (grey) above sqllock (blue).
func render(w io.Writer, bars []*bar) {
	const (
		left, right, top, rowH, barH = 230, 120, 50, 46, 16
		width                        = 900
	)
	max := 0.0
	for _, b := range bars {
		max = maxf(max, b.ours, b.raw)
	}
	height := top + rowH*len(bars) + 40
	scale := float64(width-left-right) / max
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="22" font-size="15" font-weight="bold">Uncontended TryAcquire + Release: µs per operation (lower is better)</text>`+"\n", 10)
	fmt.Fprintf(w, `<rect x="%d" y="30" width="12" height="10" fill="#9e9e9e"/><text x="%d" y="39">raw SQL, same statements</text>`+"\n", left, left+16)
	fmt.Fprintf(w, `<rect x="%d" y="30" width="12" height="10" fill="#1f6fb2"/><text x="%d" y="39">sqllock</text>`+"\n", left+200, left+216)
	for i, b := range bars {
		y := top + i*rowH
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH+4, b.label)
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#9e9e9e"/>`+"\n", left, y, b.raw*scale, barH)
		fmt.Fprintf(w, `<text x="%.1f" y="%d">%.0f</text>`+"\n", float64(left)+b.raw*scale+4, y+12, b.raw)
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#1f6fb2"/>`+"\n", left, y+barH+2, b.ours*scale, barH)
		fmt.Fprintf(w, `<text x="%.1f" y="%d">%.0f (ratio %.2f)</text>`+"\n", float64(left)+b.ours*scale+4, y+barH+14, b.ours, b.sumRatio/float64(b.runs))
	}
	fmt.Fprintln(w, `</svg>`)
}

func maxf(v ...float64) float64 {
	m := v[0]
	for _, x := range v[1:] {
		if x > m {
			m = x
		}
	}
	return m
}
