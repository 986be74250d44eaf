package main

import (
	"context"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/dialect/mysql"
	"github.com/sqllock/sqllock/dialect/postgres"
	"github.com/sqllock/sqllock/internal/dbtest"
)

// BenchmarkElectionFailover measures failover: a leader process (sqllock
// elect, running sleep) is killed with SIGKILL while a campaigner in the
// benchmark's process waits, and the time from the kill to the
// campaigner's election is measured. Nothing releases a killed leader's
// lease: the campaigner is elected when it expires, at most TTL after the
// leader's last renewal (every TTL/3). The leader is killed as soon as it
// is seen leading (kill=elected: the worst case, a whole TTL left), or at
// a random moment of its first TTL (kill=random). It reports p50 and max
// failover in milliseconds, and max as a fraction of the TTL. Each op
// takes one to two TTLs; run:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 10x ./cmd/sqllock
func BenchmarkElectionFailover(b *testing.B) {
	for _, kind := range []string{"postgres", "mysql"} {
		for _, c := range []struct {
			ttl    time.Duration
			random bool
		}{{2 * time.Second, false}, {2 * time.Second, true}, {5 * time.Second, false}, {5 * time.Second, true}} {
			ttl, kill := c.ttl, "elected"
			if c.random {
				kill = "random"
			}
			b.Run(kind+"/ttl="+ttl.String()+"/kill="+kill, func(b *testing.B) {
				dsn, d := benchBackend(b, kind)
				ctx := context.Background()
				if err := sqllock.Migrate(ctx, d); err != nil {
					b.Fatal(err)
				}
				el, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: ttl})
				if err != nil {
					b.Fatal(err)
				}
				var took []time.Duration
				rng := rand.New(rand.NewPCG(1, 2))
				b.ResetTimer()
				for i := range b.N {
					var after time.Duration
					if c.random {
						after = time.Duration(rng.Int64N(int64(ttl)))
					}
					took = append(took, failover(b, el, dsn, "failover-"+strconv.Itoa(i), ttl, after))
				}
				b.StopTimer()
				slices.Sort(took)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
				b.ReportMetric(ms(took[len(took)-1]), "max-ms")
				b.ReportMetric(float64(took[len(took)-1])/float64(ttl), "max/ttl")
			})
		}
	}
}

// failover runs one leader process, waits until it leads, kills it after
// after while el campaigns, and returns the time from the kill to el's
// election.
func failover(b *testing.B, el *sqllock.Election, dsn, name string, ttl, after time.Duration) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := execElect(ctx, dsn, name, ttl)
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	defer c.Wait()
	for {
		if _, err := el.Leader(ctx, name); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatal("the leader process was never elected")
		case <-time.After(10 * time.Millisecond):
		}
	}
	won := make(chan time.Time, 1)
	go func() {
		lead, err := el.Campaign(ctx, name, "successor")
		if err != nil {
			b.Error(err)
			won <- time.Time{}
			return
		}
		won <- time.Now()
		_ = lead.Resign(context.Background())
	}()
	// The campaigner waits for the lease's end (or an announcement): it
	// cannot be elected before the lease expires.
	time.Sleep(after)
	killed := time.Now()
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	at := <-won
	if at.IsZero() {
		b.FailNow()
	}
	return at.Sub(killed)
}

// benchBackend returns a DSN for the sqllock binary and a dialect on the
// same namespace, of the benchmark's own.
func benchBackend(b *testing.B, kind string) (string, dialect.Dialect) {
	b.Helper()
	if kind == "postgres" {
		db, schema := dbtest.Postgres(b)
		u, err := url.Parse(dbtest.PostgresURL(b))
		if err != nil {
			b.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		d, err := postgres.New(db, postgres.WithSchema(schema))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = d.Close(context.Background()) })
		return u.String(), d
	}
	db, database := dbtest.MySQL(b)
	c, err := gomysql.ParseDSN(dbtest.MySQLDSN(b))
	if err != nil {
		b.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", Host: c.Addr, Path: "/" + database, User: url.User(c.User)}
	if c.Passwd != "" {
		u.User = url.UserPassword(c.User, c.Passwd)
	}
	d, err := mysql.New(db, mysql.WithDatabase(database))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close(context.Background()) })
	return u.String(), d
}

// execElect prepares `sqllock elect --ttl ttl name -- sleep 600` on dsn.
func execElect(ctx context.Context, dsn, name string, ttl time.Duration) *exec.Cmd {
	c := exec.CommandContext(ctx, bin, "elect", "--ttl", ttl.String(), "--value", "doomed", name, "--", "sleep", "600")
	c.Env = append(os.Environ(), "SQLLOCK_DSN="+dsn)
	return c
}
