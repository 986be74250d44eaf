package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/dbtest"
)

// TestMain makes the test binary a worker process when the smoke test
// starts it as one.
func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		if err := worker(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peers worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	dbtest.CloseAll()
	os.Exit(code)
}

// TestSmoke runs the whole benchmark once, briefly (a round, one waiter,
// 200 ms a hand-off run), on the test servers and a redis-server of its
// own: it checks that every system runs and that the summary has a row for
// each, not how fast. Without a redis-server binary the Redis systems are
// left out.
func TestSmoke(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := params{
		cfg:         config{Postgres: dbtest.PostgresURL(t), MySQL: dbtest.MySQLDSN(t)},
		self:        self,
		rounds:      1,
		uncontended: 100 * time.Millisecond,
		handoff:     200 * time.Millisecond,
		waiters:     []int{1},
	}
	if addr, ok := startRedis(t); ok {
		p.cfg.Redis = addr
		p.systems = systems
	} else {
		for _, s := range systems {
			if !strings.HasPrefix(s.name, "red") {
				p.systems = append(p.systems, s)
			}
		}
	}
	var out, log bytes.Buffer
	if err := run(context.Background(), p, &out, &log); err != nil {
		t.Fatalf("%v\n%s%s", err, log.String(), out.String())
	}
	for _, s := range p.systems {
		if !strings.Contains(out.String(), "BenchmarkPeerHandoff/system="+s.name+"/waiters=1/round=1\t") ||
			!strings.Contains(out.String(), "| "+s.name+" |") {
			t.Errorf("no results of %s:\n%s", s.name, out.String())
		}
	}
}

// startRedis starts a redis-server without persistence on a free loopback
// port, stopped when the test ends; false without the binary.
func startRedis(t *testing.T) (string, bool) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Log("no redis-server: the Redis systems are left out")
		return "", false
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr, true
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dsn, sep, want string }{
		{"postgres://u@h:5432/test?sslmode=disable", "/", "postgres://u@h:5432/x?sslmode=disable"},
		{"postgres://u@h:5432", "/", ""},
		{"root@tcp(127.0.0.1:3306)/test", ")/", "root@tcp(127.0.0.1:3306)/x"},
		{"root@tcp(h:1)/?parseTime=true", ")/", "root@tcp(h:1)/x?parseTime=true"},
	} {
		got, err := withDatabase(c.dsn, "x", c.sep)
		if c.want == "" {
			if err == nil {
				t.Errorf("withDatabase(%q) = %q, want an error", c.dsn, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", c.dsn, got, err, c.want)
		}
	}
}

func TestStatistics(t *testing.T) {
	t.Parallel()
	if j := jain([]int{5, 5, 5, 5}); j != 1 {
		t.Errorf("jain of equal counts = %v, want 1", j)
	}
	if j := jain([]int{8, 0, 0, 0}); j != 0.25 {
		t.Errorf("jain of one process's grants = %v, want 1/4", j)
	}
	ds := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	if p := percentile(ds, 0.5); p != 2 {
		t.Errorf("p50 = %v ms, want 2", p)
	}
	if p := percentile(ds, 0.99); p != 4 {
		t.Errorf("p99 = %v ms, want 4", p)
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("p50 of nothing is not NaN")
	}
	if s := spread([]float64{3, 1, math.NaN(), 2}, "%.0f"); s != "2 (1–3)" {
		t.Errorf("spread = %q", s)
	}
}

// TestHandoffLatencyCountsBarging: a release while another process waits
// is timed to that waiter's grant, past a latecomer's grant in between.
func TestHandoffLatencyCountsBarging(t *testing.T) {
	t.Parallel()
	evs := []event{
		{proc: 0, requested: 0, granted: 10, release: 20},
		{proc: 0, requested: 21, granted: 22, release: 30}, // the releaser barges
		{proc: 1, requested: 5, granted: 40, release: 50},  // waited since 5
	}
	h := latencies(evs)
	want := []time.Duration{20, 10} // from the releases at 20 and 30 to the grant at 40
	if h.overlaps != 0 || len(h.latencies) != 2 || h.latencies[0] != want[0] || h.latencies[1] != want[1] {
		t.Fatalf("%+v, want latencies %v", h, want)
	}
}
