package sqllockotel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/internal/sqlrun"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/observe"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllockotel"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Finish(m.Run())) }

// db is one dialect on a private, migrated schema or database.
type db struct {
	kind  string
	sql   *sql.DB
	d     dialect.Dialect
	ns    string // schema or database
	locks string // the lock table's qualified name
}

func openDB(t *testing.T, kind string) *db {
	t.Helper()
	var e *db
	switch kind {
	case "postgres":
		sdb, schema := dbtest.Postgres(t)
		d, err := postgres.New(sdb, postgres.WithSchema(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := d.Close(ctx); err != nil {
				t.Errorf("closing the dialect: %v", err)
			}
		})
		e = &db{kind: kind, sql: sdb, d: d, ns: schema, locks: `"` + schema + `".sqllock_locks`}
	case "mysql":
		sdb, database := dbtest.MySQL(t)
		d, err := mysql.New(sdb, mysql.WithDatabase(database))
		if err != nil {
			t.Fatal(err)
		}
		e = &db{kind: kind, sql: sdb, d: d, ns: database, locks: "`" + database + "`.sqllock_locks"}
	}
	if err := sqllock.Migrate(t.Context(), e.d); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return e
}

// polling wraps a dialect so that its lock table counts the acquire
// statements that returned, per name, and so that waiters poll (it hides
// the dialect's announcements): a test can release a lock right after a
// waiter's refused poll, when its next poll is far off.
type polling struct {
	dialect.Dialect
	locks *countingLocks
}

func newPolling(t *testing.T, d dialect.Dialect) *polling {
	return &polling{Dialect: d, locks: &countingLocks{LockTable: testutil.Tables(t, d).Locks, n: make(map[string]int)}}
}

// Catalogue counts the lock table's statements and hides the notifier.
func (p *polling) Catalogue() dialect.Catalogue {
	return testutil.LocksOnly(p.Dialect.Catalogue())
}

// Tables has the counted lock table alone.
func (p *polling) Tables() (*sqlrun.Tables, error) { return &sqlrun.Tables{Locks: p.locks}, nil }

type countingLocks struct {
	sqlrun.LockTable
	mu   sync.Mutex
	n    map[string]int
	gate chan struct{} // if not nil, acquires wait for it to close
}

// hold makes acquire statements wait until the returned function is
// called.
func (c *countingLocks) hold() (open func()) {
	gate := make(chan struct{})
	c.mu.Lock()
	c.gate = gate
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.gate = nil
		c.mu.Unlock()
		close(gate)
	}
}

func (c *countingLocks) Acquire(ctx context.Context, p dialect.AcquireParams) (int64, error) {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	token, err := c.LockTable.Acquire(ctx, p)
	c.mu.Lock()
	c.n[p.Name]++
	c.mu.Unlock()
	return token, err
}

func (c *countingLocks) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// metrics reads the instruments through a manual reader.
// recorded is an Observer whose metrics and spans a test reads.
type recorded struct {
	obs *sqllockotel.Observer
	m   *metrics
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

// newRecorded returns an Observer (with lock names) on a manual metric
// reader and a span recorder, shut down when t ends.
func newRecorded(t *testing.T) recorded {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := sqllockotel.New(sqllockotel.Options{MeterProvider: mp, TracerProvider: tp, LockNames: true})
	if err != nil {
		t.Fatal(err)
	}
	return recorded{obs: obs, m: &metrics{t: t, r: reader}, rec: rec, tp: tp}
}

// spans returns the ended spans named name.
func (r recorded) spans(name string) []sdktrace.ReadOnlySpan {
	var spans []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.Name() == name {
			spans = append(spans, s)
		}
	}
	return spans
}

type metrics struct {
	t  *testing.T
	r  *sdkmetric.ManualReader
	rm metricdata.ResourceMetrics
}

func (m *metrics) collect() *metrics {
	m.t.Helper()
	if err := m.r.Collect(context.Background(), &m.rm); err != nil {
		m.t.Fatalf("collect: %v", err)
	}
	return m
}

func (m *metrics) find(name string) (metricdata.Metrics, bool) {
	for _, sm := range m.rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			if x.Name == name {
				return x, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// int sums the data points of a counter or gauge with the attributes want.
func (m *metrics) int(name string, want ...attribute.KeyValue) int64 {
	m.t.Helper()
	x, ok := m.find(name)
	if !ok {
		return 0
	}
	var n int64
	switch data := x.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range data.DataPoints {
			if matches(dp.Attributes, want) {
				n += dp.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, dp := range data.DataPoints {
			if matches(dp.Attributes, want) {
				n += dp.Value
			}
		}
	default:
		m.t.Fatalf("%s: %T is not an int64 sum or gauge", name, x.Data)
	}
	return n
}

// hist is the merged histogram points with the attributes want.
type hist struct {
	count    uint64
	sum      float64
	min, max float64
}

func (m *metrics) hist(name string, want ...attribute.KeyValue) hist {
	m.t.Helper()
	x, ok := m.find(name)
	if !ok {
		return hist{}
	}
	data, ok := x.Data.(metricdata.Histogram[float64])
	if !ok {
		m.t.Fatalf("%s: %T is not a float64 histogram", name, x.Data)
	}
	if x.Unit != "s" {
		m.t.Errorf("%s: unit %q, want s", name, x.Unit)
	}
	h := hist{}
	for _, dp := range data.DataPoints {
		if !matches(dp.Attributes, want) {
			continue
		}
		if mn, ok := dp.Min.Value(); ok && (h.count == 0 || mn < h.min) {
			h.min = mn
		}
		if mx, ok := dp.Max.Value(); ok && mx > h.max {
			h.max = mx
		}
		h.count += dp.Count
		h.sum += dp.Sum
	}
	return h
}

var (
	table       = sqllockotel.KeyStrategy.String(observe.StrategyTable)
	pessimistic = sqllockotel.KeyStrategy.String(observe.StrategyPessimistic)
	acquired    = sqllockotel.KeyOutcome.String(string(observe.OutcomeAcquired))
	busy        = sqllockotel.KeyOutcome.String(string(observe.OutcomeBusy))
	waitMode    = sqllockotel.KeyMode.String("wait")
	tryMode     = sqllockotel.KeyMode.String("try")
)

func name(n string) attribute.KeyValue { return sqllockotel.KeyName.String(n) }

// A scripted scenario — acquire, contend, hand off (through one locker, and
// announced by the database), re-enter, guard, lose a lease, the
// pessimistic strategy, retries, reap — read back through the SDK's manual
// reader and span recorder: every instrument's values and every span.
func TestScenario(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"postgres", "mysql"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			scenario(t, openDB(t, kind))
		})
	}
}

func scenario(t *testing.T, e *db) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	o := newRecorded(t)
	obs, rec, tp, m := o.obs, o.rec, o.tp, o.m
	dialectAttr := sqllockotel.KeyDialect.String(e.d.Name())
	ctx, root := tp.Tracer("test").Start(ctx, "scenario")

	// Acquire, and a refused try.
	pd := newPolling(t, e.d)
	tbl, err := sqllock.NewTable(pd, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{MaxBackoff: time.Hour, Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	k1, err := tbl.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.TryAcquire(ctx, "a"); !errors.Is(err, sqllock.ErrLocked) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrLocked", err)
	}

	// Contend and hand off through the locker: release after the waiter's
	// 9th refused poll, with its acquire statements held back meanwhile, so
	// that the release reaches the waiter before any poll can succeed.
	type result struct {
		lock *sqllock.Lock
		err  error
	}
	got := make(chan result, 1)
	go func() {
		k, err := tbl.Acquire(ctx, "a")
		got <- result{k, err}
	}()
	testutil.Eventually(ctx, t, "the waiter polled 9 times", func() bool { return pd.locks.count("a") >= 1+1+9 })
	m.collect()
	if n := m.int("sqllock.waiters", table, dialectAttr); n != 1 {
		t.Errorf("waiters while one waits: %d, want 1", n)
	}
	if n := m.int("sqllock.locks.held", table, dialectAttr); n != 1 {
		t.Errorf("held while a is held: %d, want 1", n)
	}
	open := pd.locks.hold()
	if err := k1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	open()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	k2 := r.lock

	// Guard a transaction, release.
	tx, err := e.sql.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.Guard(ctx, tx); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := k2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Re-enter.
	octx := sqllock.WithOwner(ctx, "me")
	r1, err := tbl.Acquire(octx, "r")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := tbl.TryAcquire(octx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if n := m.collect().int("sqllock.locks.held", table, dialectAttr); n != 1 {
		t.Errorf("held with a re-entered lock: %d, want 1", n)
	}
	for _, k := range []*sqllock.Lock{r2, r1} {
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Lose a lease: renewed at least once, then taken from its owner. The
	// long TTL keeps a stalled test process (a loaded machine) from losing
	// it first, the short interval keeps the test quick.
	const lossyTTL = 12 * time.Second
	lossy, err := sqllock.NewTable(pd, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: lossyTTL, RenewInterval: time.Second, Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	kl, err := lossy.Acquire(ctx, "lossy")
	if err != nil {
		t.Fatal(err)
	}
	renewedAttrs := []attribute.KeyValue{name("lossy"), sqllockotel.KeyOutcome.String(string(observe.RenewOK))}
	testutil.Eventually(ctx, t, "a renewal", func() bool {
		if err := kl.Context().Err(); err != nil {
			t.Fatalf("the lease was lost before its first renewal: %v", context.Cause(kl.Context()))
		}
		return m.collect().int("sqllock.lease.renewals", renewedAttrs...) >= 1
	})
	steal := "UPDATE " + e.locks + " SET owner = 'thief' WHERE name = ?"
	if e.kind == "postgres" {
		steal = "UPDATE " + e.locks + " SET owner = 'thief' WHERE name = $1"
	}
	if _, err := e.sql.ExecContext(ctx, steal, "lossy"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kl.Done():
	case <-ctx.Done():
		t.Fatal("the lease was never found lost")
	}
	if err := kl.Release(ctx); !errors.Is(err, sqllock.ErrLockLost) {
		t.Fatalf("Release of a lost lock: %v, want ErrLockLost", err)
	}

	// The optimistic and pessimistic strategies.
	opt, err := sqllock.NewOptimistic(e.d, sqllock.OptimisticOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	ko, err := opt.TryAcquire(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	if err := ko.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pess, err := sqllock.NewPessimistic(e.d, sqllock.PessimisticOptions{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pess.Acquire(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Retries: one transient failure of InTx's function, two conflicts of
	// RetryOnConflict's.
	runs := 0
	err = rowlock.InTx(ctx, e.d, rowlock.TxOptions{Retry: rowlock.RetryOptions{Observer: obs}}, func(ctx context.Context, tx *sql.Tx) error {
		runs++
		if runs == 1 {
			return fmt.Errorf("scripted: %w", sqllock.ErrTransient)
		}
		_, err := tx.ExecContext(ctx, "SELECT 1")
		return err
	})
	if err != nil || runs != 2 {
		t.Fatalf("InTx: %v after %d runs, want nil after 2", err, runs)
	}
	runs = 0
	err = rowlock.RetryOnConflict(ctx, rowlock.RetryOptions{Observer: obs}, func(context.Context) error {
		runs++
		if runs <= 2 {
			return rowlock.ErrConflict
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Fatalf("RetryOnConflict: %v after %d runs, want nil after 3", err, runs)
	}

	// Reap the released rows.
	reaper, err := sqllock.NewReaper(e.d, sqllock.ReaperOptions{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	reaped, err := reaper.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if reaped < 4 { // a, r, o, p
		t.Errorf("reaped %d rows, want at least 4", reaped)
	}

	// A release announced by the database (PostgreSQL): a waiter of
	// another locker, whose room listens already, acquires on the notice.
	if e.kind == "postgres" {
		noticeHandoff(ctx, t, e, obs, m)
	}
	root.End()

	// Metrics.
	m.collect()
	calls := func(n string, want int64, kv ...attribute.KeyValue) {
		t.Helper()
		kv = append(kv, name(n))
		if got := m.int("sqllock.acquire.calls", kv...); got != want {
			t.Errorf("acquire calls %v: %d, want %d", kv, got, want)
		}
		if h := m.hist("sqllock.acquire.duration", kv...); h.count != uint64(want) || want > 0 && h.min <= 0 {
			t.Errorf("acquire durations %v: %+v, want %d positive", kv, h, want)
		}
	}
	calls("a", 2, table, dialectAttr, acquired, waitMode)
	calls("a", 1, table, dialectAttr, busy, tryMode)
	calls("r", 1, acquired, waitMode)
	calls("r", 1, acquired, tryMode)
	calls("lossy", 1, acquired, waitMode)
	calls("p", 1, pessimistic, dialectAttr, acquired, waitMode)
	calls("o", 1, sqllockotel.KeyStrategy.String(observe.StrategyOptimistic), dialectAttr, acquired, tryMode)
	// The waiter slept at least half of each backoff: 5ms, 10ms, ... 640ms.
	if h := m.hist("sqllock.acquire.duration", name("a"), acquired); h.max < 0.6 {
		t.Errorf("the waiter's acquire took %vs, want >= 0.6s", h.max)
	}

	hand := m.hist("sqllock.handoff.latency", name("a"), sqllockotel.KeySource.String(observe.HandoffLocal))
	waited := m.hist("sqllock.acquire.duration", name("a"), acquired)
	if hand.count != 1 || hand.sum <= 0 || hand.sum > waited.max {
		t.Errorf("local hand-off of a: %+v, want one, within the waiter's %vs", hand, waited.max)
	}
	if h := m.hist("sqllock.handoff.latency", name("a"), sqllockotel.KeySource.String(observe.HandoffNotice)); h.count != 0 {
		t.Errorf("hand-offs of a by notice: %d, want 0 (its locker polls)", h.count)
	}

	held := func(n, end string, want uint64) hist {
		t.Helper()
		h := m.hist("sqllock.lock.held", name(n), sqllockotel.KeyEnd.String(end))
		if h.count != want || want > 0 && h.min <= 0 {
			t.Errorf("holds of %s ended %s: %+v, want %d positive", n, end, h, want)
		}
		return h
	}
	held("a", "released", 2)
	held("a", "lost", 0)
	held("r", "released", 1) // one acquisition, two holds
	held("lossy", "lost", 1)
	held("lossy", "released", 0)
	held("p", "released", 1)
	held("o", "released", 1)

	renewed := m.int("sqllock.lease.renewals", renewedAttrs...)
	margin := m.hist("sqllock.lease.margin", name("lossy"))
	if renewed < 1 || margin.count != uint64(renewed) {
		t.Errorf("lossy: %d renewals, %d margins, want as many, at least one", renewed, margin.count)
	}
	if margin.min <= 0 || margin.max > lossyTTL.Seconds() {
		t.Errorf("lossy: margins from %vs to %vs, want within (0, %v]", margin.min, margin.max, lossyTTL)
	}
	outcome := func(o observe.RenewOutcome) attribute.KeyValue {
		return sqllockotel.KeyOutcome.String(string(o))
	}
	if n := m.int("sqllock.lease.renewals", name("lossy"), outcome(observe.RenewRefused)); n != 1 {
		t.Errorf("lossy: %d refused renewals, want 1", n)
	}
	if n := m.int("sqllock.lease.renewals", outcome(observe.RenewFailed)); n != 0 {
		t.Errorf("%d failed renewals, want 0", n)
	}
	if n := m.int("sqllock.lock.lost", name("lossy"), sqllockotel.KeyCause.String(string(observe.LostExpired))); n != 1 {
		t.Errorf("lossy: lost %d times as expired, want 1", n)
	}
	if n := m.int("sqllock.lock.lost"); n != 1 {
		t.Errorf("%d locks lost, want 1", n)
	}

	if n := m.int("sqllock.reaper.deleted", dialectAttr); n != int64(reaped) {
		t.Errorf("reaper deleted %d rows, the metric says %d", reaped, n)
	}
	if h := m.hist("sqllock.reaper.duration", dialectAttr, sqllockotel.KeyOutcome.String("ok")); h.count != 1 || h.sum <= 0 {
		t.Errorf("reaper passes: %+v, want one", h)
	}
	retries := func(op, reason string, want int64) {
		t.Helper()
		if n := m.int("sqllock.retries", sqllockotel.KeyOp.String(op), sqllockotel.KeyReason.String(reason)); n != want {
			t.Errorf("retries of %s for %s: %d, want %d", op, reason, n, want)
		}
	}
	retries(observe.OpInTx, observe.RetryTransient, 1)
	retries(observe.OpRetryOnConflict, observe.RetryConflict, 2)
	if n := m.int("sqllock.retries"); n != 3 {
		t.Errorf("%d retries in all, want 3", n)
	}

	for _, s := range []attribute.KeyValue{table, pessimistic, sqllockotel.KeyStrategy.String(observe.StrategyOptimistic)} {
		if n := m.int("sqllock.locks.held", s); n != 0 {
			t.Errorf("%v: %d held at the end, want 0", s, n)
		}
		if n := m.int("sqllock.waiters", s); n != 0 {
			t.Errorf("%v: %d waiters at the end, want 0", s, n)
		}
	}
	if n := m.int("sqllock.listener.up"); n != 0 {
		t.Errorf("%d listening rooms at the end, want 0", n)
	}
	wantCuts := int64(0)
	if e.kind == "postgres" {
		wantCuts = 1 // by noticeHandoff
	}
	if l, r := m.int("sqllock.listener.losses"), m.int("sqllock.listener.reconnects"); l != wantCuts || r != wantCuts {
		t.Errorf("%d listener losses and %d reconnects, want %d", l, r, wantCuts)
	}

	// Spans.
	spans := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = append(spans[s.Name()], s)
	}
	attr := func(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
		for _, kv := range s.Attributes() {
			if kv.Key == k {
				return kv.Value
			}
		}
		return attribute.Value{}
	}
	wantAcquires := 8 // a x3, r x2, lossy, o, p
	if e.kind == "postgres" {
		wantAcquires += 4 // n and keep, by each locker
	}
	if n := len(spans["sqllock.acquire"]); n != wantAcquires {
		t.Errorf("%d acquire spans, want %d", n, wantAcquires)
	}
	handoffEvents := 0
	for _, s := range spans["sqllock.acquire"] {
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("acquire span of %s: parent %v, want the caller's span", attr(s, sqllockotel.KeyName).AsString(), s.Parent().SpanID())
		}
		if n := attr(s, sqllockotel.KeyName).AsString(); n != "a" && n != "n" {
			continue // keep's waiter may have been polling when keep was released
		}
		for _, ev := range s.Events() {
			if ev.Name == "sqllock.handoff" {
				handoffEvents++
			}
		}
	}
	wantHandoffs := 1
	if e.kind == "postgres" {
		wantHandoffs++ // n, announced
	}
	if handoffEvents != wantHandoffs {
		t.Errorf("%d hand-off span events, want %d", handoffEvents, wantHandoffs)
	}
	wantReleases := 7 // a x2, r x2, lossy, o, p
	if e.kind == "postgres" {
		wantReleases += 4
	}
	if n := len(spans["sqllock.release"]); n != wantReleases {
		t.Errorf("%d release spans, want %d", n, wantReleases)
	}
	for _, s := range spans["sqllock.release"] {
		lostOne := attr(s, sqllockotel.KeyName).AsString() == "lossy"
		if (s.Status().Code == codes.Error) != lostOne {
			t.Errorf("release span of %s: status %v", attr(s, sqllockotel.KeyName).AsString(), s.Status())
		}
	}
	if n := len(spans["sqllock.guard"]); n != 1 {
		t.Errorf("%d guard spans, want 1", n)
	}
	if ss := spans["sqllock.lost"]; len(ss) != 1 || attr(ss[0], sqllockotel.KeyCause).AsString() != string(observe.LostExpired) ||
		ss[0].Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("lost spans: %v, want one, cause expired, under the caller's span", ss)
	}
	if len(spans["sqllock.renew"]) < int(renewed)+1 {
		t.Errorf("%d renew batch spans, want at least %d", len(spans["sqllock.renew"]), renewed+1)
	}
	for _, s := range spans["sqllock.renew"] {
		size := attr(s, "sqllock.batch.size").AsInt64()
		if size < 1 || s.Parent().IsValid() || len(s.Links()) != int(size) {
			t.Errorf("renew span: size %d, parent %v, %d links", size, s.Parent(), len(s.Links()))
		}
		for _, l := range s.Links() {
			if l.SpanContext.SpanID() != root.SpanContext().SpanID() {
				t.Errorf("renew span linked to %v, want the span the leases were acquired under", l.SpanContext.SpanID())
			}
		}
	}
	if ss := spans["sqllock.in_tx.attempt"]; len(ss) != 2 || ss[0].Status().Code != codes.Error ||
		attr(ss[0], sqllockotel.KeyReason).AsString() != observe.RetryTransient || ss[1].Status().Code == codes.Error {
		t.Errorf("InTx attempt spans: %v, want a failed one, retried, and a good one", ss)
	}
	if n := len(spans["sqllock.retry_on_conflict.attempt"]); n != 3 {
		t.Errorf("%d RetryOnConflict attempt spans, want 3", n)
	}
	if ss := spans["sqllock.reap"]; len(ss) != 1 || attr(ss[0], "sqllock.deleted").AsInt64() != int64(reaped) {
		t.Errorf("reap spans: %v, want one with %d rows", ss, reaped)
	}
}

// noticeHandoff: locker t1 holds n and keep; a waiter of locker t2 for keep
// keeps t2's room listening (through a cut of its connection); once it is
// up, a waiter of t2 for n sleeps until the holder's lease ends or an
// announcement comes, and t1's release of n is announced to it.
func noticeHandoff(ctx context.Context, t *testing.T, e *db, obs *sqllockotel.Observer, m *metrics) {
	t1, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	t2, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
	if err != nil {
		t.Fatal(err)
	}
	var held []*sqllock.Lock
	for _, n := range []string{"n", "keep"} {
		k, err := t1.Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, k)
	}
	got := make(chan *sqllock.Lock, 2)
	waitFor := func(n string) {
		go func() {
			k, err := t2.Acquire(ctx, n)
			if err != nil {
				t.Error(err)
			}
			got <- k
		}()
	}
	waitFor("keep")
	testutil.Eventually(ctx, t, "the room listens", func() bool { return m.collect().int("sqllock.listener.up", table) == 1 })
	// Cut the listening connection: the room is down, then up again.
	var killed int
	err = e.sql.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE query = 'LISTEN "sqllock:`+e.ns+`"'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners: %v", killed, err)
	}
	testutil.Eventually(ctx, t, "the room listens again", func() bool {
		return m.collect().int("sqllock.listener.reconnects", table) == 1 && m.int("sqllock.listener.up", table) == 1
	})
	if n := m.int("sqllock.listener.losses", table); n != 1 {
		t.Errorf("listener losses: %d, want 1", n)
	}
	waitFor("n")
	testutil.Eventually(ctx, t, "two waiters", func() bool { return m.collect().int("sqllock.waiters", table) == 2 })
	for _, k := range held {
		if err := k.Release(ctx); err != nil {
			t.Fatal(err)
		}
		k2 := <-got
		if k2 == nil {
			t.FailNow()
		}
		if err := k2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m.collect()
	if h := m.hist("sqllock.handoff.latency", name("n"), sqllockotel.KeySource.String(observe.HandoffNotice)); h.count != 1 || h.sum <= 0 {
		t.Errorf("hand-offs of n by notice: %+v, want one", h)
	}
	if h := m.hist("sqllock.handoff.latency", name("n"), sqllockotel.KeySource.String(observe.HandoffLocal)); h.count != 0 {
		t.Errorf("local hand-offs of n: %+v, want none (another locker released it)", h)
	}
}

// A release request that reaches its holder is counted, with the lease's
// strategy and dialect, and recorded as a span with its reason.
func TestRevoked(t *testing.T) {
	t.Parallel()
	e := openDB(t, "postgres")
	ctx := t.Context()
	r := newRecorded(t)
	holder, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{TTL: 3 * time.Second, Observer: r.obs}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := holder.TryAcquire(ctx, "moving")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.WithoutCancel(ctx))
	if asked, err := holder.RequestRelease(ctx, "moving", "rebalance"); !asked || err != nil {
		t.Fatalf("RequestRelease: %v, %v; want asked", asked, err)
	}
	<-k.Revoked()
	m := r.m.collect()
	if n := m.int("sqllock.lock.revoked", table, sqllockotel.KeyDialect.String(e.d.Name()), name("moving")); n != 1 {
		t.Errorf("requests of moving counted: %d, want 1", n)
	}
	spans := r.spans("sqllock.revoked")
	if len(spans) != 1 || !slices.Contains(spans[0].Attributes(), attribute.String("sqllock.reason", "rebalance")) {
		t.Errorf("revocation spans %v, want one with its reason", spans)
	}
}

// A break is counted, with the broken lease's strategy and dialect, and
// recorded as a span with its owner's token.
func TestBroken(t *testing.T) {
	t.Parallel()
	e := openDB(t, "postgres")
	ctx := t.Context()
	r := newRecorded(t)
	holder, err := sqllock.NewTable(e.d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sqllock.NewTable(e.d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: r.obs}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := holder.TryAcquire(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Release(context.WithoutCancel(ctx)) // ErrLockLost
	if _, ok, err := admin.Break(ctx, "free"); ok || err != nil {
		t.Fatalf("Break of a free name: %v, %v; want not held", ok, err)
	}
	if _, ok, err := admin.Break(ctx, "stuck"); !ok || err != nil {
		t.Fatalf("Break: %v, %v; want broken", ok, err)
	}
	m := r.m.collect()
	if n := m.int("sqllock.lock.broken", table, sqllockotel.KeyDialect.String(e.d.Name()), name("stuck")); n != 1 {
		t.Errorf("breaks of stuck counted: %d, want 1", n)
	}
	if n := m.int("sqllock.lock.broken"); n != 1 {
		t.Errorf("breaks counted: %d, want 1", n)
	}
	spans := r.spans("sqllock.break")
	if len(spans) != 1 || !slices.Contains(spans[0].Attributes(), sqllockotel.KeyToken.Int64(k.Token())) {
		t.Errorf("break spans %v, want one with token %d", spans, k.Token())
	}
}
