package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/internal/listen"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/faultproxy"
	"github.com/sqllock/sqllock/internal/testutil"
)

// migrated returns a dialect on a fresh schema through pool, migrated.
func migrated(t *testing.T, pool *sql.DB, opts ...postgres.Option) *postgres.Dialect {
	t.Helper()
	_, schema := dbtest.Postgres(t)
	d := dialectOn(t, pool, schema, opts...)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := sqllock.Migrate(ctx, d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return d
}

// Through a transaction pooler, pgx's default statement cache meets
// prepared statements of other clients on the server connections it is
// given (42P05) or misses its own (26000); without WithPooler, the error
// says so and names the fix. Every acquisition here runs on a new client
// connection (no idle ones are kept), which prepares the acquire statement
// on the server connection the pooler gives it; prepared statements outlive
// their client there (transaction pooling resets nothing), and the pool has
// 10 server connections at most (scripts/test.sh), so by the 11th
// acquisition at the latest a client prepares the statement where another
// one already did: the test does not depend on how the clients interleave.
func TestPreparedStatementsThroughTransactionPoolerNameTheFix(t *testing.T) {
	t.Parallel()
	pool := dbtest.OpenPostgres(t, dbtest.PgBouncerURL(t, dbtest.Transaction))
	d := migrated(t, pool)
	pool.SetMaxIdleConns(0)
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const tries = 100
	for i := range tries {
		lock, err := locker.TryAcquire(ctx, fmt.Sprintf("stmt-%d", i))
		if err == nil {
			err = lock.Release(ctx)
		}
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "postgres.WithPooler()") || !strings.Contains(err.Error(), "default_query_exec_mode") {
			t.Fatalf("the error does not name the fix: %v", err)
		}
		t.Logf("acquisition %d failed as expected: %v", i+1, err)
		return
	}
	t.Fatalf("%d acquisitions on new client connections through transaction pooling with pgx's statement cache and no WithPooler: no error", tries)
}

// subscriber records a Notifier's announcements.
type subscriber struct {
	ready    chan struct{}
	released chan string
	lost     chan error
}

func newSubscriber() *subscriber {
	return &subscriber{ready: make(chan struct{}, 4), released: make(chan string, 16), lost: make(chan error, 4)}
}

func (s *subscriber) Ready() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *subscriber) Released(name string) {
	select {
	case s.released <- name:
	default:
	}
}

func (s *subscriber) Lost(err error) {
	select {
	case s.lost <- err:
	default:
	}
}

// Behind a transaction pooler, LISTEN succeeds but nothing it listens for
// arrives: the dialect finds out with the notification it sends itself,
// reports the loss with an error that names WithListenDSN, and never
// claims to listen.
func TestListeningBehindTransactionPoolerIsReportedLost(t *testing.T) {
	t.Parallel()
	pool := dbtest.OpenPostgres(t, dbtest.PgBouncerURL(t, dbtest.Transaction))
	d := migrated(t, pool, postgres.WithPooler())
	s := newSubscriber()
	sub := d.Catalogue().Notifier.Subscribe(s)
	defer sub.Unsubscribe()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case err := <-s.lost:
		if !errors.Is(err, listen.ErrNotDelivered) || !strings.Contains(err.Error(), "WithListenDSN") {
			t.Fatalf("lost: %v; want an error wrapping listen.ErrNotDelivered that names WithListenDSN", err)
		}
	case <-s.ready:
		t.Fatal("Ready behind a transaction pooler")
	case <-ctx.Done():
		t.Fatal("never: Lost")
	}
	if sub.Listening() {
		t.Fatal("Listening() = true behind a transaction pooler")
	}
}

// The listening connection of WithListenDSN goes to the server itself, and
// hears the releases of statements that go through the transaction pooler;
// in session pooling, a connection of the pool listens.
func TestListeningBesideAPooler(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mode dbtest.PoolMode
		opts func(t *testing.T) []postgres.Option
	}{
		{"transaction/WithListenDSN", dbtest.Transaction, func(t *testing.T) []postgres.Option {
			return []postgres.Option{postgres.WithPooler(), postgres.WithListenDSN(dbtest.PostgresURL(t))}
		}},
		{"session/pool", dbtest.Session, func(t *testing.T) []postgres.Option { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.OpenPostgres(t, dbtest.PgBouncerURL(t, c.mode))
			d := migrated(t, pool, c.opts(t)...)
			s := newSubscriber()
			sub := d.Catalogue().Notifier.Subscribe(s)
			defer sub.Unsubscribe()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			select {
			case <-s.ready:
			case err := <-s.lost:
				t.Fatalf("lost: %v", err)
			case <-ctx.Done():
				t.Fatal("never: Ready")
			}
			const name = "beside-a-pooler"
			p := dialect.AcquireParams{Name: name, Owner: "a", TTL: time.Hour}
			token, err := testutil.Tables(t, d).Locks.Acquire(ctx, p)
			if err != nil || token == 0 {
				t.Fatalf("acquire: %d, %v", token, err)
			}
			if _, ok, err := testutil.Tables(t, d).Locks.Remaining(ctx, name); err != nil || !ok {
				t.Fatalf("remaining: %v, %v", ok, err)
			}
			if ok, err := testutil.Tables(t, d).Locks.Release(ctx, dialect.Lease{Name: name, Owner: "a", Token: token}, 0); err != nil || !ok {
				t.Fatalf("release: %v, %v", ok, err)
			}
			select {
			case got := <-s.released:
				if got != name {
					t.Fatalf("announced %q, want %q", got, name)
				}
			case err := <-s.lost:
				t.Fatalf("lost: %v", err)
			case <-ctx.Done():
				t.Fatal("never: the release's announcement")
			}
		})
	}
}

// A bad listening DSN is refused by New.
func TestWithListenDSNRefusesABadDSN(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", "postgres://nowhere.invalid/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := postgres.New(db, postgres.WithListenDSN("postgres://a b@/%zz")); err == nil {
		t.Fatal("New accepted an unparsable listening DSN")
	}
	if _, err := postgres.New(db, postgres.WithListenConfig(nil)); err == nil {
		t.Fatal("New accepted a nil listening configuration")
	}
}

// Eight migrators at once, each on a pool of its own through transaction
// pooling, all finish: the migration lock is a transaction's, so nothing
// is left on a server connection that the pooler hands to another client,
// and no statement relies on a prepared one.
func TestConcurrentMigrationsThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	url := dbtest.PgBouncerURL(t, dbtest.Transaction)
	_, schema := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const migrators = 8
	errs := make(chan error, migrators)
	var wg sync.WaitGroup
	for i := range migrators {
		d := dialectOn(t, dbtest.OpenPostgres(t, url), schema)
		wg.Go(func() {
			if i%2 == 0 {
				errs <- sqllock.Migrate(ctx, d)
				return
			}
			_, _, err := sqllock.MigrationVersion(ctx, d)
			if err == nil {
				err = sqllock.Migrate(ctx, d)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("migrate through transaction pooling: %v", err)
		}
	}
	d := dialectOn(t, dbtest.OpenPostgres(t, url), schema)
	v, dirty, err := sqllock.MigrationVersion(ctx, d)
	if err != nil || dirty || v == 0 {
		t.Fatalf("version %d, dirty %v, %v", v, dirty, err)
	}
}

// A migrator waiting for the migration lock through transaction pooling
// stops when its context ends, and leaves no wait behind on the server:
// the cancel request goes through the pooler to the server connection the
// wait runs on.
func TestMigrationWaitThroughTransactionPoolerEndsWithContext(t *testing.T) {
	t.Parallel()
	db, schema := dbtest.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Another migrator of the schema, holding the lock.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('sqllock:migrate:' || $1, 0))`, schema); err != nil {
		t.Fatal(err)
	}
	d := dialectOn(t, dbtest.OpenPostgres(t, dbtest.PgBouncerURL(t, dbtest.Transaction)), schema)
	mctx, mcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer mcancel()
	if err := sqllock.Migrate(mctx, d); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("migrate behind a held lock: %v, want the context's error", err)
	}
	testutil.Eventually(ctx, t, "no migrator waiting on the server", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%sqllock:migrate:%' || $1 || '%'`, schema).Scan(&n)
		return err == nil && n == 0
	})
}

// A listening connection that goes silent (its traffic stalled, as behind a
// dead peer that sent no reset) is found out by the next probe, reported
// lost, and replaced once traffic flows again.
func TestSilentListenerIsFoundOut(t *testing.T) {
	t.Parallel()
	db, schema := dbtest.Postgres(t)
	u, err := url.Parse(dbtest.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	d := dialectOn(t, db, schema, postgres.WithListenDSN(u.String()), postgres.WithProbeEvery(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := newSubscriber()
	sub := d.Catalogue().Notifier.Subscribe(s)
	defer sub.Unsubscribe()
	next := func(want string) {
		t.Helper()
		select {
		case <-s.ready:
			if want != "ready" {
				t.Fatalf("ready, want %s", want)
			}
		case err := <-s.lost:
			if want != "lost" {
				t.Fatalf("lost (%v), want %s", err, want)
			}
			if !strings.Contains(err.Error(), "probe did not come back") {
				t.Fatalf("lost: %v, want the probe's error", err)
			}
		case <-ctx.Done():
			t.Fatalf("never: %s", want)
		}
	}
	next("ready")
	proxy.Stall(10 * time.Second)
	next("lost")
	if sub.Listening() {
		t.Fatal("listening on a silent connection")
	}
	next("ready") // after the stall
}
