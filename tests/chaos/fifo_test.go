package chaos

import (
	"testing"
	"time"
)

// fifoHistory builds a history: each row is worker, op, kind, token (or
// ticket, for Enqueued), at (ms).
func fifoHistory(rows ...[]any) []Event {
	var es []Event
	for _, r := range rows {
		e := Event{Worker: r[0].(string), Op: int64(r[1].(int)), Kind: r[2].(Kind), Name: "q", At: int64(r[4].(int)) * int64(time.Millisecond)}
		if e.Kind == Enqueued {
			e.Ticket = int64(r[3].(int))
		} else {
			e.Token = int64(r[3].(int))
		}
		es = append(es, e)
	}
	return es
}

func TestCheckFIFO(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	for _, c := range []struct {
		name string
		h    []Event
		want int
	}{
		{"in order", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, Enqueued, 11, 3},
			[]any{"a", 1, AcquireOK, 100, 10}, []any{"b", 1, AcquireOK, 101, 20},
		), 0},
		{"later ticket served first", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, Enqueued, 11, 3},
			[]any{"b", 1, AcquireOK, 100, 10}, []any{"a", 1, AcquireOK, 101, 20},
		), 1},
		{"ticketless acquire jumps the queue", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"c", 1, AcquireInvoke, 0, 5}, []any{"c", 1, AcquireOK, 100, 6},
			[]any{"a", 1, AcquireOK, 101, 20},
		), 1},
		{"reply order differs from grant order", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, Enqueued, 11, 3},
			[]any{"b", 1, AcquireOK, 101, 10}, []any{"a", 1, AcquireOK, 100, 20},
		), 0},
		{"concurrent tickets", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"b", 1, AcquireInvoke, 0, 1},
			[]any{"b", 1, Enqueued, 10, 2}, []any{"a", 1, Enqueued, 11, 3},
			[]any{"b", 1, AcquireOK, 100, 10}, []any{"a", 1, AcquireOK, 101, 20},
		), 0},
		{"cancelled waiter skipped", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, Enqueued, 11, 3},
			[]any{"b", 1, AcquireOK, 100, 10}, []any{"a", 1, AcquireFail, 0, 20},
		), 0},
		{"killed waiter skipped", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, AcquireOK, 100, 10},
		), 0},
		{"expired ticket skipped", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, AcquireOK, 100, 10},
			[]any{"a", 1, AcquireOK, 101, 5000},
		), 0},
		{"two served before", fifoHistory(
			[]any{"a", 1, AcquireInvoke, 0, 0}, []any{"a", 1, Enqueued, 10, 1},
			[]any{"b", 1, AcquireInvoke, 0, 2}, []any{"b", 1, AcquireOK, 100, 10},
			[]any{"c", 1, AcquireInvoke, 0, 3}, []any{"c", 1, AcquireOK, 101, 11},
			[]any{"a", 1, AcquireOK, 102, 20},
		), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			vs := CheckFIFO(c.h, ttl)
			if len(vs) != c.want {
				t.Fatalf("%d violations, want %d: %v", len(vs), c.want, vs)
			}
			for _, v := range vs {
				if v.Kind != "fifo order" {
					t.Fatalf("violation of kind %q", v.Kind)
				}
			}
		})
	}
}
