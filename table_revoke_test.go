package sqllock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/observe"
)

// revokedEvents passes on the observe.RevokedObserver events it is told.
type revokedEvents chan observe.RevokedEvent

func (c revokedEvents) Revoked(_ context.Context, e observe.RevokedEvent) { c <- e }

// A release requested from another locker reaches the holder at its next
// renewal, on Revoked and as an event, with its reason; the lock stays
// held, re-entrant holds share the request, and a lock released or never
// held cannot be asked.
func TestRequestRelease(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		events := make(revokedEvents, 1)
		holder, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{
			TTL: 3 * time.Second, Observer: events}})
		if err != nil {
			t.Fatal(err)
		}
		asker, err := sqllock.NewTable(e.d, sqllock.TableOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := asker.RequestRelease(ctx, "", "why"); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Fatalf("RequestRelease of an empty name: %v, want ErrInvalidName", err)
		}
		if _, err := asker.RequestRelease(ctx, "job", "bad\x00reason"); !errors.Is(err, sqllock.ErrInvalidValue) {
			t.Fatalf("RequestRelease with a NUL byte: %v, want ErrInvalidValue", err)
		}
		if asked, err := asker.RequestRelease(ctx, "job", "nobody"); err != nil || asked {
			t.Fatalf("RequestRelease of a free name = %v, %v; want not asked", asked, err)
		}

		k, err := holder.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		k2, err := holder.TryAcquire(sqllock.WithOwner(ctx, k.Owner()), "job")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-k.Revoked():
			t.Fatal("Revoked closed before any request")
		default:
		}
		if k.RevokeReason() != "" {
			t.Fatalf("RevokeReason before a request = %q", k.RevokeReason())
		}
		if asked, err := asker.RequestRelease(ctx, "job", "deploy v1.3"); err != nil || !asked {
			t.Fatalf("RequestRelease of a held name = %v, %v; want asked", asked, err)
		}
		select {
		case <-k.Revoked():
		case <-ctx.Done():
			t.Fatal("the holder was never told of the request")
		}
		<-k2.Revoked() // re-entrant holds share the lease, and its request
		if k.RevokeReason() != "deploy v1.3" || k2.RevokeReason() != "deploy v1.3" {
			t.Fatalf("RevokeReason = %q, %q; want deploy v1.3", k.RevokeReason(), k2.RevokeReason())
		}
		if ev := <-events; ev.Name != "job" || ev.Token != k.Token() || ev.Reason != "deploy v1.3" {
			t.Fatalf("the event = %+v; want job, token %d, deploy v1.3", ev, k.Token())
		}
		if err := k.Context().Err(); err != nil {
			t.Fatalf("the asked lock's context: %v, want it still held", err)
		}
		if err := k2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if asked, err := asker.RequestRelease(ctx, "job", "late"); err != nil || asked {
			t.Fatalf("RequestRelease after the release = %v, %v; want not asked", asked, err)
		}

		// The next holder is not asked by the request of the one before.
		n, err := holder.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		defer n.Release(ctx)
		select {
		case <-n.Revoked():
			t.Fatal("the next holder's Revoked is closed")
		default:
		}
	})
}

// Locks other than the lock table's cannot be asked: their Revoked never
// closes.
func TestRevokedOfOtherLocks(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		sem, err := sqllock.NewSemaphore(e.d, 2, sqllock.SemaphoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		k, err := sem.TryAcquire(ctx, "pool")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release(ctx)
		select {
		case <-k.Revoked():
			t.Fatal("a semaphore permit's Revoked is closed")
		default:
		}
		if k.RevokeReason() != "" {
			t.Fatalf("a permit's RevokeReason = %q", k.RevokeReason())
		}
	})
}
