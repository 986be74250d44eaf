package sqllockotel_test

import (
	"context"
	"database/sql"
	"io/fs"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/observe"
)

// memDialect is a lock table in memory: it costs next to nothing, so that a
// benchmark on it times the library's own work alone.
type memDialect struct {
	db *sql.DB // never connects
	memLocks
}

func (d *memDialect) Name() string                                          { return "mem" }
func (d *memDialect) DB() *sql.DB                                           { return d.db }
func (d *memDialect) Migrations() fs.FS                                     { return fstest.MapFS{} }
func (d *memDialect) Catalogue() dialect.Catalogue                          { return dialect.Catalogue{} }
func (d *memDialect) Reap(context.Context, dialect.ReapParams) (int, error) { return 0, nil }
func (d *memDialect) MigrationDriver(context.Context, *sql.Conn) (database.Driver, error) {
	return nil, sqllock.ErrUnsupported
}

// Tables implements sqlrun.TableSource: the lock table in memory.
func (d *memDialect) Tables() (*sqlrun.Tables, error) { return &sqlrun.Tables{Locks: &d.memLocks}, nil }

type memLocks struct {
	mu    sync.Mutex
	token int64
	held  map[string]dialect.Lease
}

func (m *memLocks) Acquire(_ context.Context, p dialect.AcquireParams) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[p.Name]; ok {
		return 0, nil
	}
	m.token++
	m.held[p.Name] = dialect.Lease{Name: p.Name, Owner: p.Owner, Token: m.token}
	return m.token, nil
}

func (m *memLocks) Release(_ context.Context, l dialect.Lease, _ time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[l.Name] != l {
		return false, nil
	}
	delete(m.held, l.Name)
	return true, nil
}

func (m *memLocks) Remaining(context.Context, string) (time.Duration, bool, error) {
	return -1, true, nil
}

func (m *memLocks) RenewMany(_ context.Context, ls []dialect.Lease, _ time.Duration) ([]sqlrun.Renewal, error) {
	rs := make([]sqlrun.Renewal, len(ls))
	for i := range rs {
		rs[i].OK = true
	}
	return rs, nil
}

func (m *memLocks) Break(_ context.Context, name string, token int64) (dialect.LockInfo, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.held[name]
	li := dialect.LockInfo{Name: l.Name, Owner: l.Owner, Token: l.Token, Holds: 1}
	if ok && token != 0 && l.Token != token {
		return li, false, nil
	}
	delete(m.held, name)
	return li, ok, nil
}

func (m *memLocks) Guard(context.Context, *sql.Tx, dialect.Lease) (bool, error) { return true, nil }
func (m *memLocks) List(context.Context) ([]dialect.LockInfo, error)            { return nil, nil }

// BenchmarkInstrumentation times an uncontended TryAcquire+Release on a lock
// table in memory, with no observer (off-ns/op), with sqllockotel recording
// metrics alone (metrics-ns/op, a no-op tracer), and metrics and spans
// through the SDK as BenchmarkTryAcquireRelease's otel side does
// (otel-ns/op), alternating in chunks so that the shared machine's drift
// hits all three alike. The differences are what observability adds to
// each acquire+release, whatever the database.
func BenchmarkInstrumentation(b *testing.B) {
	db, err := sql.Open("pgx", "postgres://nowhere.invalid/none")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	full, metricsOnly := benchObservers(b)
	sides := []struct {
		unit string
		obs  observe.Observer
		l    *sqllock.Table
		took time.Duration
	}{{unit: "off-ns/op"}, {unit: "metrics-ns/op", obs: metricsOnly}, {unit: "otel-ns/op", obs: full}}
	for i := range sides {
		d := &memDialect{db: db, memLocks: memLocks{held: make(map[string]dialect.Lease)}}
		if sides[i].l, err = sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: sides[i].obs}}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	const chunk = 500
	for left := b.N; left > 0; left -= chunk {
		for i := range sides {
			start := time.Now()
			for range min(left, chunk) {
				k, err := sides[i].l.TryAcquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := k.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sides[i].took += time.Since(start)
		}
	}
	for _, s := range sides {
		b.ReportMetric(float64(s.took.Nanoseconds())/float64(b.N), s.unit)
	}
}
