package sqllockgocron_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	sqllockgocron "github.com/sqllock/sqllock/contrib/gocron"
)

// A run's lock is renewed while the job runs past the TTL, and its
// release, even on an ended context, honours the minimum hold.
func TestLockerRenewsAndHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, db, err := openSQLite(ctx, filepath.Join(t.TempDir(), "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Long enough that no renewal of a loaded machine comes too late
	// (renewals every TTL/3): the lease outlives its TTL by renewals
	// alone. At 2s it was lost on a loaded machine.
	const ttl = 10 * time.Second
	table, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: ttl}, MinHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l := sqllockgocron.NewLocker(table)
	lock, err := l.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + ttl/2) // the job runs past its TTL
	if _, err := l.Lock(ctx, "job"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("Lock while a run holds the lock past its TTL: %v, want ErrLocked", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel() // the scheduler shuts down
	if err := lock.Unlock(ended); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if _, err := l.Lock(ctx, "job"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("Lock within MinHold of the last grant: %v, want ErrLocked", err)
	}
	infos, err := table.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Holds != 0 {
		t.Fatalf("List after Unlock: %+v, want the lock held by nobody until MinHold", infos)
	}
}
