package dialecttest

import (
	"sync"
	"testing"

	"github.com/sqllock/sqllock/internal/sqlrun"
)

// latchChecks are the checks of a sqlrun.LatchTable: a latch keeps the
// count it was created with, its count never goes below 0, exactly N
// concurrent count-downs of a latch of N take one, Delete removes it, and
// where count-downs are announced the one that leaves 0 is.
var latchChecks = []struct {
	name  string
	check func(t *testing.T, e *env, lt sqlrun.LatchTable)
}{
	{"Create", checkLatchCreate},
	{"CountDown", checkLatchCountDown},
	{"Concurrent", checkLatchConcurrent},
	{"Announce", checkLatchAnnounce},
}

// Create inserts a latch once: a second Create, with any count, reports
// the first one's and changes nothing; a name without a latch counts -1.
func checkLatchCreate(t *testing.T, e *env, lt sqlrun.LatchTable) {
	if n, err := lt.Count(e.ctx, "l"); err != nil || n != -1 {
		t.Fatalf("Count before Create = %d, %v; want -1", n, err)
	}
	if n, err := lt.Create(e.ctx, "l", 3); err != nil || n != 3 {
		t.Fatalf("Create(3) = %d, %v; want 3", n, err)
	}
	if n, err := lt.Create(e.ctx, "l", 7); err != nil || n != 3 {
		t.Fatalf("second Create(7) = %d, %v; want 3, the first count", n, err)
	}
	if n, err := lt.Count(e.ctx, "l"); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
	if ok, err := lt.Delete(e.ctx, "l"); err != nil || !ok {
		t.Fatalf("Delete = %v, %v; want true", ok, err)
	}
	if ok, err := lt.Delete(e.ctx, "l"); err != nil || ok {
		t.Fatalf("second Delete = %v, %v; want false", ok, err)
	}
	if n, err := lt.Create(e.ctx, "l", 7); err != nil || n != 7 {
		t.Fatalf("Create(7) after Delete = %d, %v; want 7", n, err)
	}
}

// CountDown takes one at a time down to 0 and no further, reporting the
// count it left; on a name without a latch it takes nothing and reports
// -1.
func checkLatchCountDown(t *testing.T, e *env, lt sqlrun.LatchTable) {
	if took, left, err := lt.CountDown(e.ctx, "none"); err != nil || took || left != -1 {
		t.Fatalf("CountDown without a latch = %v, %d, %v; want false, -1", took, left, err)
	}
	if _, err := lt.Create(e.ctx, "l", 2); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		took bool
		left int
	}{{true, 1}, {true, 0}, {false, 0}, {false, 0}} {
		took, left, err := lt.CountDown(e.ctx, "l")
		if err != nil || took != want.took || left != want.left {
			t.Fatalf("CountDown %d = %v, %d, %v; want %v, %d", i, took, left, err, want.took, want.left)
		}
	}
	if n, err := lt.Count(e.ctx, "l"); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v; want 0", n, err)
	}
}

// Of 2N concurrent count-downs of a latch of N, exactly N take one, and
// exactly one of them leaves 0.
func checkLatchConcurrent(t *testing.T, e *env, lt sqlrun.LatchTable) {
	const n = 4
	if _, err := lt.Create(e.ctx, "l", n); err != nil {
		t.Fatal(err)
	}
	var (
		mu           sync.Mutex
		taken, zeros int
		wg           sync.WaitGroup
	)
	for range 2 * n {
		wg.Go(func() {
			took, left, err := lt.CountDown(e.ctx, "l")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if took {
				taken++
				if left == 0 {
					zeros++
				}
			}
		})
	}
	wg.Wait()
	if taken != n || zeros != 1 {
		t.Fatalf("%d count-downs took one and %d left 0; want %d and 1", taken, zeros, n)
	}
}

// Where the table announces count-downs and the dialect has a Notifier,
// the count-down that leaves 0 is announced under the latch's name.
func checkLatchAnnounce(t *testing.T, e *env, lt sqlrun.LatchTable) {
	n := e.Dialect.Catalogue().Notifier
	if !lt.Announces() || n == nil || e.h.Polling {
		t.Skip("count-downs are not announced")
	}
	s := newSubscriber()
	sub := n.Subscribe(s)
	defer sub.Unsubscribe()
	sub.Watch("l")
	select {
	case <-s.ready:
	case err := <-s.lost:
		t.Fatalf("the listening connection failed: %v", err)
	case <-e.ctx.Done():
		t.Fatal("never: Ready")
	}
	if _, err := lt.Create(e.ctx, "l", 2); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := lt.CountDown(e.ctx, "l"); err != nil {
			t.Fatal(err)
		}
	}
	for {
		select {
		case got := <-s.released:
			if got == "l" {
				return
			}
		case err := <-s.lost:
			t.Fatalf("the listening connection failed: %v", err)
		case <-e.ctx.Done():
			t.Fatal("never: the announcement of the latch that reached 0")
		}
	}
}
