package sqllock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
)

// A holder's value is read by anyone without acquiring, in Value and List;
// it is fenced by the lease's token: a broken holder cannot write it, and
// the next holder never shows it. It is kept apart from elections' values.
func TestLockValue(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		opts := sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}}
		holder, err := sqllock.NewTable(e.d, opts)
		if err != nil {
			t.Fatal(err)
		}
		reader, err := sqllock.NewTable(e.d, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := reader.Value(ctx, ""); !errors.Is(err, sqllock.ErrInvalidName) {
			t.Fatalf("Value of an empty name: %v, want ErrInvalidName", err)
		}
		if li, ok, err := reader.Value(ctx, "value"); err != nil || ok {
			t.Fatalf("Value of a free name = %+v, %v, %v; want not held", li, ok, err)
		}

		k, err := holder.TryAcquire(ctx, "value")
		if err != nil {
			t.Fatal(err)
		}
		li, ok, err := reader.Value(ctx, "value")
		if err != nil || !ok || li.Owner != k.Owner() || li.Token != k.Token() || li.Holds != 1 || li.Value != "" || li.ExpiresIn <= 0 {
			t.Fatalf("Value before SetValue = %+v, %v, %v; want %q's lease without a value", li, ok, err, k.Owner())
		}
		if err := k.SetValue(ctx, "bad\x00value"); !errors.Is(err, sqllock.ErrInvalidValue) {
			t.Fatalf("SetValue with a NUL byte: %v, want ErrInvalidValue", err)
		}
		if err := k.SetValue(ctx, "host-a, v1.2"); err != nil {
			t.Fatal(err)
		}
		if li, ok, err := reader.Value(ctx, "value"); err != nil || !ok || li.Value != "host-a, v1.2" || li.Token != k.Token() {
			t.Fatalf("Value = %+v, %v, %v; want host-a, v1.2 for token %d", li, ok, err, k.Token())
		}

		// A re-entrant hold shares the value.
		k2, err := holder.TryAcquire(sqllock.WithOwner(ctx, k.Owner()), "value")
		if err != nil {
			t.Fatal(err)
		}
		if err := k2.SetValue(ctx, "host-a, v1.3"); err != nil {
			t.Fatal(err)
		}
		list, err := reader.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var listed bool
		for _, li := range list {
			if li.Name == "value" {
				listed = li.Value == "host-a, v1.3" && li.Holds == 2
			}
		}
		if !listed {
			t.Fatalf("List = %+v, want the lock with 2 holds and value host-a, v1.3", list)
		}

		// An election's leader value is not a lock's value, nor the reverse.
		el, err := sqllock.NewElection(e.d, sqllock.LeaseOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := el.Leader(ctx, "value"); !errors.Is(err, sqllock.ErrNoLeader) {
			t.Fatalf("Leader of a lock with a value: %v, want ErrNoLeader", err)
		}
		lead, err := el.Campaign(ctx, "value-election", "leader-a")
		if err != nil {
			t.Fatal(err)
		}
		if li, ok, err := reader.Value(ctx, "value-election"); err != nil || !ok || li.Value != "" {
			t.Fatalf("Value of an election's lease = %+v, %v, %v; want no lock value", li, ok, err)
		}
		if err := lead.Resign(ctx); err != nil {
			t.Fatal(err)
		}

		// A broken holder writes no value; its successor shows none.
		if _, ok, err := reader.Break(ctx, "value"); err != nil || !ok {
			t.Fatalf("Break = %v, %v", ok, err)
		}
		if err := k.SetValue(ctx, "stale"); !errors.Is(err, sqllock.ErrLockLost) {
			t.Fatalf("SetValue after a break: %v, want ErrLockLost", err)
		}
		next, err := reader.TryAcquire(ctx, "value")
		if err != nil {
			t.Fatal(err)
		}
		if li, ok, err := reader.Value(ctx, "value"); err != nil || !ok || li.Token != next.Token() || li.Value != "" {
			t.Fatalf("Value after a takeover = %+v, %v, %v; want token %d without a value", li, ok, err, next.Token())
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := next.SetValue(ctx, "after release"); !errors.Is(err, sqllock.ErrNotHeld) {
			t.Fatalf("SetValue after Release: %v, want ErrNotHeld", err)
		}
		if li, ok, err := reader.Value(ctx, "value"); err != nil || ok {
			t.Fatalf("Value after the release = %+v, %v, %v; want not held", li, ok, err)
		}
		_ = k2.Release(ctx)
		_ = k.Release(ctx)

		// Only the lock table's leases keep values.
		sem, err := sqllock.NewSemaphore(e.d, 2, sqllock.SemaphoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sem.TryAcquire(ctx, "value-sem")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		if err := p.SetValue(ctx, "x"); !errors.Is(err, sqllock.ErrUnsupported) {
			t.Fatalf("SetValue on a semaphore's permit: %v, want ErrUnsupported", err)
		}
	})
}
