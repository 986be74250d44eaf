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

const peerSample = `# peers: 2026-01-01T00:00:00Z, load average 1 1 1
BenchmarkPeerUncontended/system=redsync/clients=1/round=1	1	3408 ops/s
BenchmarkPeerHandoff/system=redsync/waiters=1/round=1	30	127.000 p50-ms	352.2 p99-ms	10.0 grants/s	0.550 jain	-1.0 stmts/grant	0 overlaps
BenchmarkPeerHandoff/system=redsync/waiters=1/round=2	30	100.000 p50-ms	352.2 p99-ms	10.0 grants/s	0.550 jain	-1.0 stmts/grant	0 overlaps
BenchmarkPeerHandoff/system=redsync/waiters=1/round=3	30	140.000 p50-ms	352.2 p99-ms	10.0 grants/s	0.550 jain	-1.0 stmts/grant	0 overlaps
BenchmarkPeerHandoff/system=pg-advisory/waiters=1/round=1	900	0.200 p50-ms	2.0 p99-ms	900.0 grants/s	1.000 jain	2.0 stmts/grant	0 overlaps
BenchmarkPeerHandoff/system=pg-advisory/waiters=10/round=1	900	0.300 p50-ms	2.0 p99-ms	900.0 grants/s	1.000 jain	2.0 stmts/grant	0 overlaps
BenchmarkPeerHandoff/system=sqllock-pg/waiters=10/round=1	0	NaN p50-ms	NaN p99-ms	0.0 grants/s	0.000 jain	-1.0 stmts/grant	0 overlaps
`

func TestParsePeersTakesMedians(t *testing.T) {
	ss, waiters, err := parsePeers(strings.NewReader(peerSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].system != "redsync" || ss[1].system != "pg-advisory" {
		t.Fatalf("series %+v", ss)
	}
	if got := ss[0].y[1]; got != 127 {
		t.Fatalf("redsync p50 at 1 waiter = %v, want the median 127", got)
	}
	if len(waiters) != 2 || waiters[0] != 1 || waiters[1] != 10 {
		t.Fatalf("waiters %v, want [1 10]", waiters)
	}
	var out strings.Builder
	renderPeers(&out, ss, waiters)
	svg := out.String()
	if !strings.HasPrefix(svg, "<svg") || strings.Count(svg, "<polyline") != 2 || strings.Count(svg, "<circle") != 3 {
		t.Fatalf("svg:\n%s", svg)
	}
}

const scaleSample = `# 2026-01-01T00:00:00Z x86_64 2 cores
BenchmarkScaleHeld/postgres/held=10-2         	    3000	   1500000 ns/op	   1400000 base-ns/op	         1.07 ratio
BenchmarkScaleHeld/postgres/held=1000000-2    	    3000	   1800000 ns/op	   1500000 base-ns/op	         1.20 ratio
BenchmarkScaleHeld/mysql/held=10-2            	    3000	    900000 ns/op	    950000 base-ns/op	         0.95 ratio
BenchmarkScaleReaper/postgres/expired=1000000-2	       1	 30.0 pass-s	 33000 rows/s
`

func TestParseScaleReadsHeldCurves(t *testing.T) {
	ss, held, err := parseScale(strings.NewReader(scaleSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].system != "postgres" || ss[1].system != "mysql" {
		t.Fatalf("series %+v", ss)
	}
	if got := ss[0].y[1000000]; got != 1800 {
		t.Fatalf("postgres at 10^6 held = %v µs, want 1800", got)
	}
	if len(held) != 2 || held[0] != 10 || held[1] != 1000000 {
		t.Fatalf("held %v, want [10 1000000]", held)
	}
	var out strings.Builder
	renderLines(&out, "title", "held locks", ss, held)
	if !strings.HasPrefix(out.String(), "<svg") || strings.Count(out.String(), "<polyline") != 2 {
		t.Fatalf("svg:\n%s", out.String())
	}
}
