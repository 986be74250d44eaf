package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// renewCounting counts the renewal statements of a dialect's lock table.
type renewCounting struct {
	dialect.Dialect
	batches, renewed *atomic.Int64
}

// Catalogue has the lock table alone: waiters poll.
func (c renewCounting) Catalogue() dialect.Catalogue {
	return testutil.LocksOnly(c.Dialect.Catalogue())
}

// Tables counts the lock table's renewals.
func (c renewCounting) Tables() (*sqlrun.Tables, error) {
	tb, err := sqlrun.Build(c.DB(), c.Catalogue())
	if err != nil {
		return nil, err
	}
	tb.Locks = renewCountingLocks{tb.Locks, c}
	return tb, nil
}

type renewCountingLocks struct {
	sqlrun.LockTable
	c renewCounting
}

func (l renewCountingLocks) RenewMany(ctx context.Context, ls []dialect.Lease, ttl time.Duration) ([]sqlrun.Renewal, error) {
	l.c.batches.Add(1)
	rs, err := l.LockTable.RenewMany(ctx, ls, ttl)
	for _, r := range rs {
		if r.OK {
			l.c.renewed.Add(1)
		}
	}
	return rs, err
}

// One process holding many leases renews them in a few statements per
// renewal period, not one per lease, and keeps them all.
func TestBatchedRenewal(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		// Bounded by go test's -timeout alone: 1500 acquisitions on a
		// loaded machine can take minutes.
		ctx := t.Context()
		var batches, renewed atomic.Int64
		d := renewCounting{e.d, &batches, &renewed}
		// The TTL is long, so that no busy machine can make a renewal miss
		// its trust window: acquiring the leases alone can take many
		// minutes on an overloaded machine (seen: 17 minutes on SQLite,
		// whose one connection the renewals share with the 8 acquirers),
		// and a lease is renewed only every interval while waiting its
		// turn for a connection. That the renewals work, the renewed
		// counter shows. The interval sets the batch window (1/20 of it,
		// at most 50ms), which a busy machine's late timers overrun less
		// at 1s.
		const n, ttl, every = 1500, time.Hour, time.Second
		l, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl, RenewInterval: every}})
		if err != nil {
			t.Fatal(err)
		}
		locks := make([]*sqllock.Lock, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		const workers = 8
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					locks[i], errs[i] = l.TryAcquire(ctx, fmt.Sprintf("lease-%d", i))
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		// Watch three renewal periods' worth of renewals.
		start, b0, r0 := time.Now(), batches.Load(), renewed.Load()
		testutil.Eventually(ctx, t, fmt.Sprintf("%d renewals", 3*n), func() bool { return renewed.Load()-r0 >= 3*n })
		periods := int64(time.Since(start)/every) + 1
		// 1500 leases falling due together, on the renewal grid, need two
		// batches of at most 1000 per period, and a third for timers that
		// fire after the window closed; a busy machine runs a period's
		// timers over a few windows, so allow five per period — against
		// 1500 single renewals, or dozens of batches per period when the
		// leases do not fall due together.
		if got := batches.Load() - b0; got > 5*periods+2 {
			t.Fatalf("%d batches in %d periods for %d leases, want at most %d", got, periods, n, 5*periods+2)
		}
		for i, k := range locks {
			if k.Context().Err() != nil {
				t.Fatalf("lease %d lost: %v", i, context.Cause(k.Context()))
			}
			if err := k.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
