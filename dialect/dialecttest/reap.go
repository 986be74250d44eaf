package dialecttest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
)

// Reap deletes expired and released rows of the lock table, at most Limit
// per call, and spares live leases, which stay held and renewable; a name
// whose row was reaped gets a larger token than before.
func checkReapLimit(t *testing.T, e *env) {
	tb := e.table(Locks)
	var live, gone []dialect.Lease
	for i := range 3 {
		live = append(live, e.grant(tb, fmt.Sprintf("reap-live-%d", i), "o"))
		r := e.grant(tb, fmt.Sprintf("reap-released-%d", i), "o")
		e.release(tb, r, true)
		x := e.grant(tb, fmt.Sprintf("reap-expired-%d", i), "o")
		e.expire(tb, x.Name)
		gone = append(gone, r, x)
	}
	n, err := e.Dialect.Reap(e.ctx, dialect.ReapParams{Limit: 2})
	e.must(err, "Reap")
	if n != 2 {
		t.Fatalf("Reap with Limit 2 and %d rows to delete: %d deleted", len(gone), n)
	}
	total := n
	for range len(gone) {
		n, err := e.Dialect.Reap(e.ctx, dialect.ReapParams{Limit: 2})
		e.must(err, "Reap")
		if n < 0 || n > 2 {
			t.Fatalf("Reap with Limit 2: %d deleted", n)
		}
		if n == 0 {
			break
		}
		total += n
	}
	if total != len(gone) {
		t.Fatalf("Reap deleted %d rows, want the %d expired and released ones", total, len(gone))
	}
	for _, l := range gone {
		if _, ok, err := e.tables(e.Dialect).Locks.Remaining(e.ctx, l.Name); err != nil || ok {
			t.Fatalf("Remaining(%q) after reaping: row still there (%v, %v)", l.Name, ok, err)
		}
	}
	infos, err := tb.stmts.List(e.ctx)
	e.must(err, "List")
	if len(infos) != len(live) {
		t.Fatalf("List after reaping: %+v, want the %d live leases", infos, len(live))
	}
	for _, l := range live {
		e.holder(tb, l, 1)
	}
	renewed, err := testutil.Renewed(tb.stmts.RenewMany(e.ctx, live, long))
	e.must(err, "RenewMany")
	if count(renewed) != len(live) {
		t.Fatalf("RenewMany of the live leases after reaping: %v", renewed)
	}
	for _, l := range gone {
		if again := e.grant(tb, l.Name, "p"); again.Token <= l.Token {
			t.Fatalf("token %d for %q after its row was reaped, want > %d", again.Token, l.Name, l.Token)
		}
	}
}

// Reapers in several processes (pools of their own) beside acquirers that
// release or abandon their leases: nothing fails, and every name's tokens
// grow in the order they were granted.
func checkReapConcurrent(t *testing.T, e *env) {
	tb := e.table(Locks)
	const reapers, acquirers, rounds, names = 3, 3, 20, 2
	var (
		mu        sync.Mutex
		last      = map[string]int64{}
		transient atomic.Int64
		stop      = make(chan struct{})
		rwg, awg  sync.WaitGroup
	)
	// A deadlock or serialization failure is reported as ErrTransient and
	// may be repeated; anything else is a failure.
	fails := func(what string, err error) bool {
		if errors.Is(err, dialect.ErrTransient) {
			transient.Add(1)
			return false
		}
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return true
		}
		return false
	}
	for range reapers {
		d := e.Open(t, 0)
		rwg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := d.Reap(e.ctx, dialect.ReapParams{Limit: 1}); fails("Reap", err) {
					return
				}
			}
		})
	}
	for a := range acquirers {
		awg.Go(func() {
			owner := fmt.Sprintf("acquirer-%d", a)
			for i := 0; i < rounds; {
				name := fmt.Sprintf("churn-%d", (a+i)%names)
				token, err := tb.grant(e.ctx, name, owner, long)
				if fails("grant", err) {
					return
				}
				if token == 0 {
					continue // held by another acquirer, or a transient failure
				}
				mu.Lock()
				if token <= last[name] {
					t.Errorf("token %d granted for %q after %d", token, name, last[name])
				}
				last[name] = token
				mu.Unlock()
				// Every other lease is abandoned: it expires, to be taken
				// over or reaped.
				if i%2 == 1 {
					err = e.Expire(e.ctx, tb.name, name)
				} else {
					var ok bool
					if ok, err = tb.stmts.Release(e.ctx, dialect.Lease{Name: name, Owner: owner, Token: token}, 0); err == nil && !ok {
						err = errors.New("not held")
					}
				}
				if err != nil {
					t.Errorf("ending the lease of %q: %v", name, err)
					return
				}
				i++
			}
		})
	}
	awg.Wait()
	close(stop)
	rwg.Wait()
	if n := transient.Load(); n > 0 {
		t.Logf("%d transient failures (repeated)", n)
	}
}
