package sqllock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/observe"
)

// Break ends another process's lease at once: its guarded writes are
// refused, its lock's context ends with ErrLockLost at the next renewal,
// the next holder's token is larger, and the break is logged and reported
// to the observer.
func TestBreak(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		holder, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute, RenewInterval: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		logs := newLogRecorder()
		var obs breakRecorder
		admin, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Logger: logs.logger(), Observer: &obs}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := admin.Break(ctx, ""); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Fatalf("Break of an empty name: %v, want ErrInvalidName", err)
		}
		if li, ok, err := admin.Break(ctx, "break-free"); err != nil || ok {
			t.Fatalf("Break of a free name = %+v, %v, %v; want not held", li, ok, err)
		}

		k, err := holder.TryAcquire(ctx, "break")
		if err != nil {
			t.Fatal(err)
		}
		broken, ok, err := admin.Break(ctx, "break")
		if err != nil || !ok || broken.Owner != k.Owner() || broken.Token != k.Token() || broken.Holds != 1 {
			t.Fatalf("Break = %+v, %v, %v; want the lease of %q, token %d", broken, ok, err, k.Owner(), k.Token())
		}
		logs.wait(t, ctx, "sqllock: lock broken")
		if got := obs.events(); len(got) != 1 || got[0].Name != "break" || got[0].Owner != k.Owner() ||
			got[0].Token != k.Token() || got[0].Holds != 1 || got[0].Strategy != observe.StrategyTable || got[0].Left <= 0 {
			t.Fatalf("observed breaks %+v, want the one of %q, token %d", got, k.Owner(), k.Token())
		}

		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Guard(ctx, tx); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("guard after a break: %v, want ErrLockLost", err)
		}
		_ = tx.Rollback()
		select {
		case <-k.Done():
		case <-ctx.Done():
			t.Fatal("the broken lock's context never ended")
		}
		if cause := context.Cause(k.Context()); cause != sqllock.ErrLockLost {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}

		next, err := admin.TryAcquire(ctx, "break")
		if err != nil {
			t.Fatalf("acquire after a break: %v", err)
		}
		defer next.Release(ctx)
		if next.Token() <= k.Token() {
			t.Fatalf("token after a break: %d, want > %d", next.Token(), k.Token())
		}
	})
}

// breakRecorder is an observer that records the breaks it is told of.
type breakRecorder struct {
	mu     sync.Mutex
	broken []observe.BrokenEvent
}

func (r *breakRecorder) Broken(_ context.Context, e observe.BrokenEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.broken = append(r.broken, e)
}

func (r *breakRecorder) events() []observe.BrokenEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observe.BrokenEvent(nil), r.broken...)
}
