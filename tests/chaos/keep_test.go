package chaos

import (
	"bufio"
	"cmp"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestChaosKeep runs a short scenario of every strategy, each on one of
// the databases, with SQLLOCK_CHAOS_KEEP set, reads the kept files back as
// an outside checker would, and compares them with what the run saw and
// checked in memory: the same events, the same data, the same verdict.
func TestChaosKeep(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(keepEnv, dir)
	kinds := []string{"postgres", "mysql"}
	byKind := map[string][]string{}
	for i, s := range strategies {
		byKind[kinds[i%2]] = append(byKind[kinds[i%2]], s)
	}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, strategy := range byKind[kind] {
				t.Run(strategy, func(t *testing.T) { testKeep(t, dir, kind, strategy) })
			}
		})
	}
}

func testKeep(t *testing.T, dir, kind, strategy string) {
	c := struct{ kind, strategy string }{kind, strategy}
	r := runScenario(t, c.kind, c.strategy, noFault, 1500*time.Millisecond)
	sdir := keepDir(dir, c.kind, c.strategy, noFault)
	checkKeptFields(t, sdir)
	k, err := ReadKept(sdir)
	if err != nil {
		t.Fatal(err)
	}

	m := k.Meta
	if m.Scenario != c.kind+"/"+c.strategy+"/"+noFault || m.Database != c.kind ||
		m.Strategy != c.strategy || m.Fault != noFault {
		t.Errorf("meta names another scenario: %+v", m)
	}
	wantTTL, wantMargin, wantLimit := int64(ttl), int64(trustMargin(ttl)), 0
	switch c.strategy {
	case "pessimistic":
		wantTTL, wantMargin = 0, 0
	case "semaphore", "fairsem":
		wantLimit = semaphoreLimit
	}
	if !slices.Equal(m.Names, r.names) || m.TTL != wantTTL || m.KeepAlive != int64(keepAlive) ||
		m.TrustMargin != wantMargin || m.Limit != wantLimit {
		t.Errorf("meta: names %q, TTL %d, keep-alive %d, trust margin %d, limit %d; want %q, %d, %d, %d, %d",
			m.Names, m.TTL, m.KeepAlive, m.TrustMargin, m.Limit, r.names, wantTTL, keepAlive, wantMargin, wantLimit)
	}
	if m.Format != FormatVersion || m.ReaperInterval != int64(reaperInterval) || m.ReaperBatch != reaperBatch {
		t.Errorf("meta: format %d, reaper %d/%d", m.Format, m.ReaperInterval, m.ReaperBatch)
	}
	if !slices.Equal(m.Workers, workers(r.history)) || len(m.Workers) < 4 {
		t.Errorf("meta: workers %q, want the 4 or more of the history %q", m.Workers, workers(r.history))
	}
	for _, e := range k.Events {
		if e.At < m.Start || e.At > m.End {
			t.Fatalf("event outside [start_ns, end_ns] = [%d, %d]: %v", m.Start, m.End, e)
		}
	}

	// The files hold exactly what the run checked.
	if !reflect.DeepEqual(k.Events, r.history) {
		t.Errorf("kept history differs from the run's: %d events kept, %d in the run", len(k.Events), len(r.history))
	}
	if !maps.Equal(k.Data.Counters, r.data.Counters) || !maps.Equal(k.Data.Tokens, r.data.Tokens) ||
		!slices.Equal(sortedWrites(k.Data.Writes), sortedWrites(r.data.Writes)) {
		t.Errorf("kept data differs from the run's:\n kept %+v\n  run %+v", k.Data, r.data)
	}

	// The grants and the guarded writes are there, and the committed
	// writes of the history are the counters of the data.
	type count struct {
		strategy                            string
		grants, invoked, committed, unknown int
	}
	counts := map[string]*count{}
	for _, n := range m.Names {
		counts[n] = &count{strategy: c.strategy}
	}
	ok := map[Write]bool{}
	kinds := map[Kind]int{}
	var shared, upgradeable, try, tickets int
	ops := map[string][]int64{}
	for _, e := range k.Events {
		kinds[e.Kind]++
		ops[e.Worker] = append(ops[e.Worker], e.Op)
		if e.Shared {
			shared++
		}
		if e.Upgradeable {
			upgradeable++
		}
		if e.Try {
			try++
		}
		if e.Ticket != 0 {
			tickets++
		}
		switch e.Kind {
		case SetInvoke, SetOK, SetFail:
			if e.Name != "" || e.Set == "" {
				t.Errorf("set event without its set: %v", e)
			}
			continue
		case Enqueued, TicketLost, Dequeued:
			if e.Ticket <= 0 {
				t.Errorf("ticket event without a ticket id: %v", e)
			}
		case Renewed:
			if e.TrustUntil <= e.At {
				t.Errorf("renewal without its trust window: %v", e)
			}
		}
		c := counts[e.Name]
		if c == nil {
			t.Fatalf("event on a name not in meta.json: %v", e)
		}
		switch e.Kind {
		case AcquireOK:
			c.grants++
			if e.Token <= 0 {
				t.Errorf("grant without a token: %v", e)
			}
			if lease := c.strategy != "pessimistic"; lease != (e.TrustUntil > e.At) {
				t.Errorf("grant with trust window end %d (lease: %v): %v", e.TrustUntil, lease, e)
			}
		case WriteInvoke:
			c.invoked++
		case WriteOK:
			c.committed++
			ok[Write{e.Name, e.Value, e.Token, e.Worker}] = true
		case WriteUnknown:
			c.unknown++
		}
	}
	// Every name's history matches its data; grants and writes
	// are required in all (on a loaded machine a short run may
	// leave a name untouched).
	var grants, invoked int
	for _, n := range m.Names {
		c := counts[n]
		grants, invoked = grants+c.grants, invoked+c.invoked
		t.Logf("%q: %d grants, %d guarded writes, %d committed, counter %d", n, c.grants, c.invoked, c.committed, k.Data.Counters[n])
		// A semaphore's holders write side by side: their increments
		// may be lost.
		if sem := m.Limit > 0; c.unknown != 0 || (!sem && int64(c.committed) != k.Data.Counters[n]) {
			t.Errorf("%q: %d writes committed and %d of unknown outcome in the history, counter %d in the data",
				n, c.committed, c.unknown, k.Data.Counters[n])
		}
	}
	if grants == 0 || invoked == 0 {
		t.Errorf("%d grants and %d guarded writes kept in all", grants, invoked)
	}
	for _, w := range k.Data.Writes {
		if !ok[w] {
			t.Errorf("logged write %+v is not a write-ok of the history", w)
		}
		delete(ok, w)
	}
	for w := range ok {
		t.Errorf("write-ok %+v is not in the log", w)
	}

	// What the strategy records is there: the read side of a read/write
	// lock, the tickets of a fair one, TryAcquire turns (every 4th).
	sides := c.strategy == "rwsides"
	if sides != (upgradeable > 0) || sides != (kinds[DowngradeOK] > 0) || sides != (kinds[UpgradeOK] > 0) {
		t.Errorf("%s: %d upgradeable acquisitions, %d downgrades, %d upgrades", c.strategy, upgradeable, kinds[DowngradeOK], kinds[UpgradeOK])
	}
	if (c.strategy == "rwlock" || sides) != (shared > 0) {
		t.Errorf("%d events of read-side acquisitions", shared)
	}
	if fair := c.strategy == "fair" || c.strategy == "fairsem"; fair != (kinds[Enqueued] > 0) || fair != (tickets > 0) {
		t.Errorf("%d enqueued events, %d events with a ticket", kinds[Enqueued], tickets)
	}
	if c.strategy != "election" && try == 0 {
		t.Errorf("no TryAcquire recorded")
	}
	// Operations are numbered per worker, from 1, each once invoked.
	for w, os := range ops {
		slices.Sort(os)
		os = slices.Compact(os)
		if os[0] != 1 || os[len(os)-1] != int64(len(os)) {
			t.Errorf("worker %s: operations %d to %d, %d of them; want 1 to n", w, os[0], os[len(os)-1], len(os))
		}
	}

	// The checker finds on the files what it found in memory.
	if got, want := violationStrings(CheckKept(k)), violationStrings(r.violations); !slices.Equal(got, want) || m.Violations != len(want) {
		t.Errorf("violations: %q on the kept files, %q in memory, %d in meta.json", got, want, m.Violations)
	}
}

// TestKeptRoundTrip writes a hand-made run, with an error to escape and an
// outcome-unknown write the data settles, and reads it back.
func TestKeptRoundTrip(t *testing.T) {
	t.Parallel()
	var h hist
	h.turn("a", "x", 1, 1)
	h.grant("b", "x", 2)
	h.add("b", WriteInvoke, "x", 2, 0)
	h.es = append(h.es, Event{Worker: "b", Op: 2, Kind: WriteUnknown, Name: "x", Token: 2, At: h.now + 1, Err: "commit: \"conn\" closed\n"})
	// A hold that changes sides (rwsides): upgradeable, upgraded,
	// downgraded.
	h.upgradeable("c", "y", 1)
	h.upgrade("c", "y", 1)
	h.downgrade("c", "y", 1)
	h.release("c", "y", 1)
	data := Data{Counters: map[string]int64{"x": 2, "y": 0}, Tokens: map[string]int64{"x": 2, "y": 0},
		Writes: []Write{{"x", 2, 2, "b"}, {"x", 1, 1, "a"}}}
	dir := filepath.Join(t.TempDir(), "run")
	in := Kept{Meta: Meta{Scenario: "hand-made", Names: []string{"x", "y"}, Start: 1, End: h.now + 2}, Events: h.es, Data: data}
	if err := in.Write(dir); err != nil {
		t.Fatal(err)
	}
	checkKeptFields(t, dir)
	out, err := ReadKept(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Events, in.Events) {
		t.Errorf("events:\n got %v\nwant %v", out.Events, in.Events)
	}
	data.Writes = sortedWrites(data.Writes)
	if !reflect.DeepEqual(out.Data, data) {
		t.Errorf("data:\n got %+v\nwant %+v", out.Data, data)
	}
	if !slices.Equal(out.Meta.Workers, []string{"a", "b", "c"}) || out.Meta.Events != len(in.Events) ||
		out.Meta.StartTime != "1970-01-01T00:00:00.000000001Z" {
		t.Errorf("meta: %+v", out.Meta)
	}
	wantKinds(t, Check(out.Events, out.Data))
}

// checkKeptFields checks, on the raw JSON, that every record of a kept run
// has exactly the fields the package documentation lists for its kind.
func checkKeptFields(t *testing.T, dir string) {
	t.Helper()
	want := map[string][]string{
		MetaRecord: {"kind", "format", "scenario", "database", "strategy", "fault",
			"start_ns", "end_ns", "start", "end", "ttl_ns", "keepalive_ns", "idle_timeout_ns",
			"trust_margin_ns", "limit", "reaper_interval_ns", "reaper_batch",
			"names", "workers", "faults", "injected", "events", "violations"},
		CounterRecord: {"kind", "name", "value", "token"},
		WriteRecord:   {"kind", "name", "value", "token", "worker"},
	}
	event := []string{"kind", "worker", "op", "name", "token", "value", "at_ns", "error", "set",
		"shared", "upgradeable", "try", "ticket", "trust_until_ns"}
	check := func(file string, line []byte, kinds ...string) {
		t.Helper()
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: %v: %s", file, err, line)
		}
		var kind string
		if err := json.Unmarshal(rec["kind"], &kind); err != nil {
			t.Fatalf("%s: no kind: %s", file, line)
		}
		fields, ok := want[kind]
		if file == HistoryFile {
			fields, ok = event, eventKinds[Kind(kind)]
		}
		if !ok || (kinds != nil && !slices.Contains(kinds, kind)) {
			t.Fatalf("%s: unexpected kind %q: %s", file, kind, line)
		}
		if got := slices.Sorted(maps.Keys(rec)); !slices.Equal(got, slices.Sorted(slices.Values(fields))) {
			t.Fatalf("%s: %s record has fields %q, want %q", file, kind, got, fields)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	check(MetaFile, b, MetaRecord)
	for _, file := range []string{HistoryFile, DataFile} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if file == DataFile {
				check(file, sc.Bytes(), CounterRecord, WriteRecord)
			} else {
				check(file, sc.Bytes())
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func sortedWrites(ws []Write) []Write {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(x, y Write) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Value, y.Value),
			cmp.Compare(x.Token, y.Token), cmp.Compare(x.Worker, y.Worker))
	})
	return ws
}

func violationStrings(vs []Violation) []string {
	s := []string{}
	for _, v := range vs {
		s = append(s, v.String())
	}
	return s
}
