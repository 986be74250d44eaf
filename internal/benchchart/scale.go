package main

import (
	"bufio"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var scaleLine = regexp.MustCompile(`^BenchmarkScaleHeld/([^/\s]+)/held=(\d+)(-\d+)?\s`)

// parseScale reads BenchmarkScaleHeld's lines and returns a series per
// database of its µs per acquire+release at each held-lock count (the
// median of repeated runs), in the order of their first line, and the
// counts seen, ascending.
func parseScale(r io.Reader) ([]*series, []int, error) {
	var (
		order   []*series
		byName  = map[string]*series{}
		samples = map[string]map[int][]float64{}
		held    []int
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := scaleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		f := strings.Fields(sc.Text())
		for i := 2; i+1 < len(f); i++ {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || f[i+1] != "ns/op" {
				continue
			}
			s := byName[m[1]]
			if s == nil {
				s = &series{system: m[1], y: map[int]float64{}}
				byName[m[1]] = s
				samples[m[1]] = map[int][]float64{}
				order = append(order, s)
			}
			samples[m[1]][n] = append(samples[m[1]][n], v/1000)
			if !slices.Contains(held, n) {
				held = append(held, n)
			}
		}
	}
	for _, s := range order {
		for n, vs := range samples[s.system] {
			slices.Sort(vs)
			s.y[n] = (vs[(len(vs)-1)/2] + vs[len(vs)/2]) / 2
		}
	}
	slices.Sort(held)
	return order, held, sc.Err()
}
