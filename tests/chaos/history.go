package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Kind is the kind of an event in a history.
type Kind string

// Event kinds. An operation is an invoke followed by at most one completion
// with the same worker and Op; an invoke without one (the worker was killed)
// has an unknown outcome.
const (
	// AcquireInvoke starts an acquisition; AcquireOK carries its token,
	// AcquireFail its error (refused, timed out, failed).
	AcquireInvoke Kind = "acquire"
	AcquireOK     Kind = "acquire-ok"
	AcquireFail   Kind = "acquire-fail"
	// Trusted records that the holder checked its lock and still trusted
	// it. At is taken before the check, so the lock was held at At.
	Trusted Kind = "trusted"
	// Lost records that the holder learned it had lost the lock.
	Lost Kind = "lost"
	// WriteInvoke starts a guarded read-modify-write of the name's counter
	// (At is before the transaction begins); WriteOK means it committed,
	// WriteFail that it certainly did not (Err says why), WriteUnknown that
	// its commit's outcome is unknown.
	WriteInvoke  Kind = "write"
	WriteOK      Kind = "write-ok"
	WriteFail    Kind = "write-fail"
	WriteUnknown Kind = "write-unknown"
	// ReleaseInvoke starts a release; ReleaseOK and ReleaseFail end it.
	ReleaseInvoke Kind = "release"
	ReleaseOK     Kind = "release-ok"
	ReleaseFail   Kind = "release-fail"
	// Renewed records a successful renewal of the lease (Name, Token):
	// TrustUntil is the end of its new trust window (see Event.TrustUntil).
	// Op is that of the acquisition's AcquireInvoke.
	Renewed Kind = "renewed"
)

// Event is one entry of a history.
type Event struct {
	Worker string `json:"w"`
	Op     int64  `json:"op"`            // links an invoke to its completion
	Kind   Kind   `json:"k"`             // what happened
	Name   string `json:"n"`             // lock name
	Token  int64  `json:"t,omitempty"`   // fencing token of the acquisition
	Value  int64  `json:"v,omitempty"`   // counter value written (WriteOK)
	At     int64  `json:"at"`            // wall clock, Unix nanoseconds (shared by the processes of one host)
	Err    string `json:"err,omitempty"` // the error of a failed operation
	// Shared marks an acquisition (AcquireInvoke, AcquireOK) of the read
	// side of a read/write lock: see CheckRW.
	Shared bool `json:"s,omitempty"`
	// Upgradeable marks, with Shared, an acquisition of an upgradeable
	// read (AcquireUpgradeable, TryAcquireUpgradeable): see CheckRWSides.
	Upgradeable bool `json:"u,omitempty"`
	// Set lists the names of a set (SetInvoke, SetOK, SetFail), separated
	// by commas (see SetNames).
	Set string `json:"set,omitempty"`
	// Try marks an acquisition asked for with TryAcquire (TryAcquireAll,
	// TryAcquireShared), which does not wait, on AcquireInvoke and
	// SetInvoke; unset: Acquire, which waits.
	Try bool `json:"try,omitempty"`
	// Ticket is the id of a FIFO ticket (Enqueued, TicketLost, Dequeued).
	Ticket int64 `json:"tk,omitempty"`
	// TrustUntil, on AcquireOK and Renewed of a lease, bounds the end of
	// the holder's trust window from above, in Unix nanoseconds: the
	// holder computes it as the start of the granting (renewing)
	// statement plus the TTL minus its margin, and that statement started
	// before At; so it is At + TTL - margin. 0 when the lock has no lease
	// (pessimistic).
	TrustUntil int64 `json:"tu,omitempty"`
}

// Time returns the event's time.
func (e Event) Time() time.Time { return time.Unix(0, e.At) }

func (e Event) String() string {
	s := fmt.Sprintf("%s %-8s op%-4d %-13s %q", e.Time().Format("15:04:05.000000"), e.Worker, e.Op, e.Kind, e.Name)
	if e.Token != 0 {
		s += fmt.Sprintf(" token=%d", e.Token)
	}
	if e.Value != 0 {
		s += fmt.Sprintf(" value=%d", e.Value)
	}
	if e.Shared {
		s += " shared"
	}
	if e.Upgradeable {
		s += " upgradeable"
	}
	if e.Set != "" {
		s += fmt.Sprintf(" set=%q", e.Set)
	}
	if e.Try {
		s += " try"
	}
	if e.Ticket != 0 {
		s += fmt.Sprintf(" ticket=%d", e.Ticket)
	}
	if e.TrustUntil != 0 {
		s += " trust-until=" + time.Unix(0, e.TrustUntil).Format("15:04:05.000000")
	}
	if e.Err != "" {
		s += " err=" + e.Err
	}
	return s
}

// Recorder collects the events of one worker process. It is safe for
// concurrent use. If it has a writer, each event is also written to it as a
// JSON line as it happens, so that a process killed mid-run leaves every
// event it recorded.
type Recorder struct {
	mu     sync.Mutex
	events []Event
	enc    *json.Encoder
	err    error
	ops    map[string]int64 // the last operation number of each worker
	counts map[Kind]int
	added  chan struct{} // closed and replaced by each Add; nil until WaitFor asks
}

// NewRecorder returns a recorder; w may be nil.
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{}
	if w != nil {
		r.enc = json.NewEncoder(w)
	}
	return r
}

// NextOp returns a new operation number of worker: its operations are
// numbered 1, 2, 3… whatever other workers share the recorder.
func (r *Recorder) NextOp(worker string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ops == nil {
		r.ops = map[string]int64{}
	}
	r.ops[worker]++
	return r.ops[worker]
}

// Add records e, stamping its time if e.At is zero.
func (r *Recorder) Add(e Event) {
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.counts == nil {
		r.counts = map[Kind]int{}
	}
	r.counts[e.Kind]++
	if r.added != nil {
		close(r.added)
		r.added = nil
	}
	if r.enc != nil && r.err == nil {
		r.err = r.enc.Encode(e)
	}
}

// Events returns a copy of the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Count returns how many events of kind k have been recorded.
func (r *Recorder) Count(k Kind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[k]
}

// WaitFor blocks until at least n events of kind k have been recorded, and
// reports whether they were; it returns false if ctx ends first.
func (r *Recorder) WaitFor(ctx context.Context, k Kind, n int) bool {
	for {
		r.mu.Lock()
		if r.counts[k] >= n {
			r.mu.Unlock()
			return true
		}
		if r.added == nil {
			r.added = make(chan struct{})
		}
		added := r.added
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-added:
		}
	}
}

// Err returns the first error writing events, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ReadEvents reads JSON-line events from rd, calling fn for each. A torn
// last line (a process killed while writing it) is ignored.
func ReadEvents(rd io.Reader, fn func(Event)) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pending []byte
	for sc.Scan() {
		if pending != nil {
			return fmt.Errorf("chaos: bad event line %q", pending)
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			pending = append([]byte(nil), sc.Bytes()...)
			continue
		}
		fn(e)
	}
	return sc.Err()
}
