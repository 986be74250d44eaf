package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkTryAcquireRelease/postgres/clients=1-2   5000  1800000 ns/op  0.98 ratio  900000 raw-ns/op  920000 sqllock-ns/op
BenchmarkTryAcquireRelease/postgres/clients=1-2   5000  1800000 ns/op  1.02 ratio  1100000 raw-ns/op  1080000 sqllock-ns/op
BenchmarkOptimisticTryAcquireRelease/mysql/clients=8-2  1000  750357 ns/op  0.9710 ratio  369634 raw-ns/op  380684 sqllock-ns/op
BenchmarkHandoff/postgres/hold=0s/waiters=1-2  200  1369745 ns/op  0.73 p50-ms  1.0 p99-ms
PASS
`

func TestParseAveragesRuns(t *testing.T) {
	bars, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(bars) != 2 {
		t.Fatalf("%d bars, want 2: %+v", len(bars), bars)
	}
	b := bars[0]
	if b.label != "table postgres clients=1" || b.raw != 1000 || b.ours != 1000 || b.runs != 2 {
		t.Fatalf("first bar %+v", b)
	}
	if bars[1].label != "optimistic mysql clients=8" {
		t.Fatalf("second bar %+v", bars[1])
	}
	var out strings.Builder
	render(&out, bars)
	if !strings.HasPrefix(out.String(), "<svg") || strings.Count(out.String(), "<rect") != 7 {
		t.Fatalf("svg:\n%s", out.String())
	}
}
