package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/dialect/sqlite"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
)

// BenchmarkRWLockShared measures AcquireShared+Release of the read side of
// one name by 1 and 8 concurrent readers (every reader holds the name
// beside the others), next to the same statements issued through the
// dialect's read/write lock table alone (one grant transaction, one
// release statement, without sqllock's leases, owners and events), in
// chunks taken in turn in one run. It reports sqllock-ns/op, raw-ns/op,
// ratio = raw time / sqllock time, and reads/s of sqllock. Run:
//
//	go test -run '^$' -bench RWLockShared -benchtime 400x .
func BenchmarkRWLockShared(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql", "sqlite"} {
		var d dialect.Dialect
		switch kind {
		case "postgres":
			db, schema := dbtest.Postgres(b)
			pd, err := postgres.New(db, postgres.WithSchema(schema))
			if err != nil {
				b.Fatal(err)
			}
			closeAtEnd(b, pd)
			d = pd
		case "mysql":
			db, database := dbtest.MySQL(b)
			md, err := mysql.New(db, mysql.WithDatabase(database))
			if err != nil {
				b.Fatal(err)
			}
			closeAtEnd(b, md)
			d = md
		case "sqlite":
			dbtest.SQLite(b)
			db, _ := openSQLite(b)
			sd, err := sqlite.New(db)
			if err != nil {
				b.Fatal(err)
			}
			d = sd
		}
		if err := sqllock.Migrate(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		l, err := sqllock.NewRWLock(d, sqllock.LeaseOptions{})
		if err != nil {
			b.Fatal(err)
		}
		rw := testutil.Tables(b, d).RWLocks
		for _, readers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/readers=%d", kind, readers), func(b *testing.B) {
				benchRWShared(b, d.DB(), readers, l, rw)
			})
		}
	}
}

func benchRWShared(b *testing.B, db *sql.DB, readers int, l *sqllock.RWLock, rw sqlrun.RWLockTable) {
	ctx := context.Background()
	db.SetMaxIdleConns(readers + 2)
	name := "bench-read-" + strconv.Itoa(readers)
	lib := func(int) error {
		k, err := l.AcquireShared(ctx, name)
		if err != nil {
			return err
		}
		return k.Release(ctx)
	}
	raw := func(i int) error {
		owner := "raw-" + strconv.Itoa(i)
		g, err := rw.Acquire(ctx, dialect.RWAcquireParams{Name: name, Owner: owner, TTL: 30 * time.Second, Shared: true})
		if err != nil || g.Token == 0 {
			return fmt.Errorf("raw grant %+v: %v", g, err)
		}
		_, err = rw.Release(ctx, dialect.Lease{Name: name, Owner: owner, Token: g.Token}, 0)
		return err
	}
	const chunk = 40
	var spent [2]time.Duration
	var done [2]int
	b.ResetTimer()
	for n, turn := 0, 0; n < b.N; turn++ {
		size := min(chunk, b.N-n)
		op := [2]func(int) error{lib, raw}[turn%2]
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		for c := range readers {
			wg.Go(func() {
				for i := c; i < size; i += readers {
					if err := op(n + i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		spent[turn%2] += time.Since(start)
		done[turn%2] += size
		if turn%2 == 1 {
			n += size
		}
	}
	b.StopTimer()
	if done[0] == 0 || done[1] == 0 {
		return
	}
	libNs := float64(spent[0].Nanoseconds()) / float64(done[0])
	rawNs := float64(spent[1].Nanoseconds()) / float64(done[1])
	b.ReportMetric(libNs, "sqllock-ns/op")
	b.ReportMetric(rawNs, "raw-ns/op")
	b.ReportMetric(rawNs/libNs, "ratio")
	b.ReportMetric(1e9/libNs, "reads/s")
}
