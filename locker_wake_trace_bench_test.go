package sqllock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// BenchmarkHandoffSteps breaks a MySQL hand-off (1 waiter, hold=0s and
// hold=1s, as in BenchmarkHandoff) down into the steps of the wake-up
// (instrumented here, not in the dialect): each statement of
// the pool is timed, and every hand-off's steps are reported as the time
// from the holder's release statement starting to the step's statement
// ending (p50 and p99 over the hand-offs). Run:
//
//	go test -run '^$' -bench HandoffSteps -benchtime 40x .
func BenchmarkHandoffSteps(b *testing.B) {
	tr := &tracer{}
	cfg, err := gomysql.ParseDSN(dbtest.MySQLDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(tracingConnector{c, tr})
	db.SetMaxOpenConns(dbtest.MaxOpenConns)
	db.SetMaxIdleConns(dbtest.MaxOpenConns)
	b.Cleanup(func() { db.Close() })
	_, database := dbtest.MySQL(b)
	my, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		b.Fatal(err)
	}
	closeAtEnd(b, my)
	if err := sqllock.Migrate(context.Background(), my); err != nil {
		b.Fatal(err)
	}
	for _, hold := range []time.Duration{0, time.Second} {
		b.Run(fmt.Sprintf("hold=%v", hold), func(b *testing.B) {
			tr.reset()
			lat := handoffs(b, my, fmt.Sprintf("steps-%v", hold), 2, b.N, hold)
			steps := tr.steps()
			for _, k := range stepKinds {
				d := steps[k]
				if len(d) == 0 {
					continue
				}
				slices.Sort(d)
				b.ReportMetric(ms(d[len(d)/2]), k+"-p50-ms")
				b.ReportMetric(ms(d[len(d)*99/100]), k+"-p99-ms")
			}
			slices.Sort(lat)
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
		})
	}
}

// stepKinds are the steps of a hand-off, in order, named by the
// statement that ends each: the release, the ring's count and look-up of
// the bells (side by side), the KILL QUERY, the bell's sleep ending, its
// read of the rings, its record of them, the waiter's acquire.
var stepKinds = []string{"release", "ringmark", "find", "kill", "woken", "rung", "seen", "acquire"}

// kindOf names the statement text.
func kindOf(q string) string {
	switch {
	case strings.Contains(q, "holds = holds - 1"):
		return "release"
	case strings.Contains(q, "SET rung = rung + 1 WHERE name"):
		return "ringmark"
	case strings.Contains(q, "IS_USED_LOCK"):
		return "find"
	case strings.HasPrefix(q, "KILL"):
		return "kill"
	case strings.Contains(q, "GET_LOCK('sqllock anchor"):
		return "woken"
	case strings.Contains(q, "SELECT name, rung"):
		return "rung"
	case strings.Contains(q, "SET seen"):
		return "seen"
	case strings.Contains(q, "(name, owner, token, holds"):
		return "acquire"
	}
	return ""
}

type event struct {
	kind       string
	start, end time.Time
}

// tracer records the statements of a pool.
type tracer struct {
	mu     sync.Mutex
	events []event
}

func (t *tracer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = nil
}

func (t *tracer) add(q string, start time.Time) {
	k := kindOf(q)
	if k == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, event{k, start, time.Now()})
}

// steps returns, per step, its times from a release's start over the
// hand-offs: a hand-off's steps are the first statement of each kind that
// ends after its release statement (and, but for the bell's sleep, starts
// after it), up to its acquire.
func (t *tracer) steps() map[string][]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	ev := slices.Clone(t.events)
	slices.SortFunc(ev, func(a, b event) int { return a.end.Compare(b.end) })
	out := make(map[string][]time.Duration)
	for i, r := range ev {
		if r.kind != "release" {
			continue
		}
		seen := map[string]bool{}
		for _, e := range ev[i+1:] {
			k := e.kind
			if k == "release" {
				break
			}
			// The bell's sleep began before the release.
			if seen[k] || e.start.Before(r.start) && k != "woken" {
				continue
			}
			seen[k] = true
			out[k] = append(out[k], e.end.Sub(r.start))
			if k == "acquire" {
				break
			}
		}
		out["release"] = append(out["release"], r.end.Sub(r.start))
	}
	return out
}

type tracingConnector struct {
	driver.Connector
	t *tracer
}

func (c tracingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tracingConn{mysqlConn: conn.(mysqlConn), t: c.t}, nil
}

// tracingConn times each statement, from its ExecContext or QueryContext
// to its result (through the prepared statement the driver asks for when
// a statement has arguments).
type tracingConn struct {
	mysqlConn
	t     *tracer
	start time.Time
}

func (c *tracingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.start = time.Now()
	r, err := c.mysqlConn.ExecContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.t.add(q, c.start)
	}
	return r, err
}

func (c *tracingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.start = time.Now()
	r, err := c.mysqlConn.QueryContext(ctx, q, args)
	if !errors.Is(err, driver.ErrSkip) {
		c.t.add(q, c.start)
	}
	return r, err
}

func (c *tracingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.mysqlConn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &tracingStmt{s.(mysqlStmt), c, q}, nil
}

type mysqlStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

type tracingStmt struct {
	mysqlStmt
	c *tracingConn
	q string
}

func (s *tracingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.mysqlStmt.ExecContext(ctx, args)
	s.c.t.add(s.q, s.c.start)
	return r, err
}

func (s *tracingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.mysqlStmt.QueryContext(ctx, args)
	s.c.t.add(s.q, s.c.start)
	return r, err
}
