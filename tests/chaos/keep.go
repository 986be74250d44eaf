package chaos

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// FormatVersion is the version of the kept-run format described in the
// package documentation, written to meta.json as "format".
const FormatVersion = 4

// The files of a kept run.
const (
	MetaFile    = "meta.json"
	HistoryFile = "history.jsonl"
	DataFile    = "data.jsonl"
)

// Record kinds of meta.json and data.jsonl; the records of history.jsonl
// have the event kinds ([Kind]) as theirs.
const (
	MetaRecord    = "meta"
	CounterRecord = "counter"
	WriteRecord   = "write"
)

// Meta describes a kept run: it is meta.json.
type Meta struct {
	Kind     string `json:"kind"`     // MetaRecord
	Format   int    `json:"format"`   // FormatVersion
	Scenario string `json:"scenario"` // e.g. "postgres/table/none"
	Database string `json:"database"` // "postgres", "mysql" or "tidb"
	Strategy string `json:"strategy"` // one of the strategies of the package documentation
	Fault    string `json:"fault"`    // "none", "conn-kill", "proxy", "sigstop", "sigkill" or "restart"

	// Start is just before the first worker started, End just after the
	// data was read, in Unix nanoseconds on the clock of the history;
	// StartTime and EndTime are the same instants in RFC 3339.
	Start     int64  `json:"start_ns"`
	End       int64  `json:"end_ns"`
	StartTime string `json:"start"`
	EndTime   string `json:"end"`

	TTL         int64 `json:"ttl_ns"`          // lease TTL (table and optimistic)
	KeepAlive   int64 `json:"keepalive_ns"`    // keep-alive interval (pessimistic)
	IdleTimeout int64 `json:"idle_timeout_ns"` // server idle-in-transaction timeout of the workers' sessions; 0 if none
	TrustMargin int64 `json:"trust_margin_ns"` // how much earlier than the TTL a holder stops trusting its lease; 0 without a TTL
	Limit       int   `json:"limit"`           // permits per name of a semaphore; 0 for other strategies

	// ReaperInterval and ReaperBatch are those of the sqllock.Reaper that
	// ran beside the workers (ReaperOptions.Interval, BatchSize).
	ReaperInterval int64 `json:"reaper_interval_ns"`
	ReaperBatch    int   `json:"reaper_batch"`

	Names      []string       `json:"names"`    // the lock names, which are also the counters' names
	Workers    []string       `json:"workers"`  // the workers of the history
	Faults     map[string]int `json:"faults"`   // faults injected, counted by description
	Injected   []Injection    `json:"injected"` // holders stopped or killed
	Events     int            `json:"events"`   // lines of history.jsonl
	Violations int            `json:"violations"`
}

// Injection is a fault aimed at one holder: a worker process stopped or
// killed right after a grant.
type Injection struct {
	Fault   string `json:"fault"`      // "sigstop" or "sigkill"
	Worker  string `json:"worker"`     // the holder
	Name    string `json:"name"`       // the lock it held
	Token   int64  `json:"token"`      // the token it held
	At      int64  `json:"at_ns"`      // just before SIGSTOP or SIGKILL was sent
	Resumed int64  `json:"resumed_ns"` // just after SIGCONT was sent; 0 for sigkill
}

// Kept is a run as kept on disk: its description, its whole history and the
// guarded data it left.
type Kept struct {
	Meta   Meta
	Events []Event
	Data   Data
}

// historyRecord is a line of history.jsonl. Every field is always written.
type historyRecord struct {
	Kind   Kind   `json:"kind"`
	Worker string `json:"worker"`
	Op     int64  `json:"op"`
	Name   string `json:"name"`
	Token  int64  `json:"token"`
	Value  int64  `json:"value"`
	At     int64  `json:"at_ns"`
	Err    string `json:"error"`
	Set    string `json:"set"`
	Shared bool   `json:"shared"`
	Upgr   bool   `json:"upgradeable"`
	Try    bool   `json:"try"`
	Ticket int64  `json:"ticket"`
	Trust  int64  `json:"trust_until_ns"`
}

// dataRecord is a line of data.jsonl; Worker is written for writes only.
type dataRecord struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Value  int64  `json:"value"`
	Token  int64  `json:"token"`
	Worker string `json:"worker,omitempty"`
}

var eventKinds = map[Kind]bool{
	AcquireInvoke: true, AcquireOK: true, AcquireFail: true,
	Trusted: true, Lost: true,
	WriteInvoke: true, WriteOK: true, WriteFail: true, WriteUnknown: true,
	ReleaseInvoke: true, ReleaseOK: true, ReleaseFail: true,
	SetInvoke: true, SetOK: true, SetFail: true,
	Renewed: true, Enqueued: true, TicketLost: true, Dequeued: true,
	DowngradeInvoke: true, DowngradeOK: true, DowngradeFail: true,
	UpgradeInvoke: true, UpgradeOK: true, UpgradeFail: true,
}

// Write writes k into dir, creating it if need be and replacing the files
// of an earlier run there. It fills in the fields of the meta that follow
// from the rest (Kind, Format, StartTime, EndTime, Events, and Workers if
// empty), writes the events in time order, and writes meta.json last, so
// that a directory without it holds an incomplete run.
func (k Kept) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	events := slices.Clone(k.Events)
	slices.SortStableFunc(events, func(x, y Event) int { return cmp.Compare(x.At, y.At) })
	err := writeLines(filepath.Join(dir, HistoryFile), func(enc *json.Encoder) error {
		for _, e := range events {
			r := historyRecord{Kind: e.Kind, Worker: e.Worker, Op: e.Op, Name: e.Name,
				Token: e.Token, Value: e.Value, At: e.At, Err: e.Err, Set: e.Set,
				Shared: e.Shared, Upgr: e.Upgradeable, Try: e.Try, Ticket: e.Ticket, Trust: e.TrustUntil}
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = writeLines(filepath.Join(dir, DataFile), func(enc *json.Encoder) error {
		names := make([]string, 0, len(k.Data.Counters))
		for n := range k.Data.Counters {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			r := dataRecord{Kind: CounterRecord, Name: n, Value: k.Data.Counters[n], Token: k.Data.Tokens[n]}
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		ws := slices.Clone(k.Data.Writes)
		slices.SortFunc(ws, func(x, y Write) int {
			return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.Value, y.Value),
				cmp.Compare(x.Token, y.Token), cmp.Compare(x.Worker, y.Worker))
		})
		for _, w := range ws {
			r := dataRecord{Kind: WriteRecord, Name: w.Name, Value: w.Value, Token: w.Token, Worker: w.Worker}
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	m := k.Meta
	m.Kind, m.Format, m.Events = MetaRecord, FormatVersion, len(events)
	m.StartTime = time.Unix(0, m.Start).UTC().Format(time.RFC3339Nano)
	m.EndTime = time.Unix(0, m.End).UTC().Format(time.RFC3339Nano)
	if len(m.Workers) == 0 {
		m.Workers = workers(events)
	}
	// Empty rather than null, so that every field has its type.
	if m.Names == nil {
		m.Names = []string{}
	}
	if m.Faults == nil {
		m.Faults = map[string]int{}
	}
	if m.Injected == nil {
		m.Injected = []Injection{}
	}
	b, err := json.MarshalIndent(m, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, MetaFile), append(b, '\n'), 0o644)
}

// workers returns the workers of a history, sorted.
func workers(events []Event) []string {
	ws := []string{}
	for _, e := range events {
		ws = append(ws, e.Worker)
	}
	slices.Sort(ws)
	return slices.Compact(ws)
}

// writeLines creates the file path and calls fn to write JSON lines to it.
func writeLines(path string, fn func(*json.Encoder) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = fn(json.NewEncoder(w))
	if err == nil {
		err = w.Flush()
	}
	return errors.Join(err, f.Close())
}

// ReadKept reads a run kept in dir by [Kept.Write].
func ReadKept(dir string) (Kept, error) {
	var k Kept
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return k, err
	}
	if err := json.Unmarshal(b, &k.Meta); err != nil {
		return k, fmt.Errorf("chaos: %s: %w", MetaFile, err)
	}
	if k.Meta.Kind != MetaRecord || k.Meta.Format != FormatVersion {
		return k, fmt.Errorf("chaos: %s: kind %q, format %d: want %q, %d",
			MetaFile, k.Meta.Kind, k.Meta.Format, MetaRecord, FormatVersion)
	}
	err = readLines(filepath.Join(dir, HistoryFile), func(line []byte) error {
		var r historyRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		if !eventKinds[r.Kind] {
			return fmt.Errorf("unknown event kind %q", r.Kind)
		}
		k.Events = append(k.Events, Event{Worker: r.Worker, Op: r.Op, Kind: r.Kind, Name: r.Name,
			Token: r.Token, Value: r.Value, At: r.At, Err: r.Err, Set: r.Set,
			Shared: r.Shared, Upgradeable: r.Upgr, Try: r.Try, Ticket: r.Ticket, TrustUntil: r.Trust})
		return nil
	})
	if err != nil {
		return k, err
	}
	if len(k.Events) != k.Meta.Events {
		return k, fmt.Errorf("chaos: %s has %d events, %s says %d", HistoryFile, len(k.Events), MetaFile, k.Meta.Events)
	}
	k.Data = Data{Counters: map[string]int64{}, Tokens: map[string]int64{}}
	err = readLines(filepath.Join(dir, DataFile), func(line []byte) error {
		var r dataRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		switch r.Kind {
		case CounterRecord:
			k.Data.Counters[r.Name] = r.Value
			k.Data.Tokens[r.Name] = r.Token
		case WriteRecord:
			k.Data.Writes = append(k.Data.Writes, Write{Name: r.Name, Value: r.Value, Token: r.Token, Worker: r.Worker})
		default:
			return fmt.Errorf("unknown record kind %q", r.Kind)
		}
		return nil
	})
	return k, err
}

// CheckKept checks a kept run with the checker of its strategy, as
// TestChaos checks the run live: [CheckSemaphore] with meta.json's limit
// for "semaphore" and "fairsem", [CheckElection] for "election", [Check]
// for the others (it applies the read/write model to names with read-side
// acquisitions by itself, and [CheckRWSides]' to names whose holds change
// sides), and, for "fair" and "fairsem", [CheckFIFO]
// with meta.json's TTL as well.
func CheckKept(k Kept) []Violation {
	var vs []Violation
	switch k.Meta.Strategy {
	case "semaphore", "fairsem":
		vs = CheckSemaphore(k.Events, k.Meta.Limit)
	case "election":
		vs = CheckElection(k.Events, k.Data)
	default:
		vs = Check(k.Events, k.Data)
	}
	if k.Meta.Strategy == "fair" || k.Meta.Strategy == "fairsem" {
		vs = append(vs, CheckFIFO(k.Events, time.Duration(k.Meta.TTL))...)
	}
	return vs
}

// readLines calls fn with each line of the file path.
func readLines(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if ferr := fn(line); ferr != nil {
				return fmt.Errorf("chaos: %s:%d: %w", filepath.Base(path), n, ferr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
