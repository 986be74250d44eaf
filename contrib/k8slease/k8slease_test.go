package sqllockk8slease_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/dbtest"
	"github.com/sqllock/sqllock/tests/migrated"
	"k8s.io/client-go/tools/leaderelection"

	sqllockk8slease "github.com/sqllock/sqllock/contrib/k8slease"
)

// The elector's timing: short, so that a test runs in seconds, with
// renewals far apart from the deadlines even on a busy machine.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// event is a leadership's start or end, at a time read from the database
// (microseconds of its clock, which no session setting moves).
type event struct {
	identity string
	start    bool
	term     int64
	at       int64
}

// history records events from several goroutines.
type history struct {
	mu     sync.Mutex
	events []event
}

func (h *history) add(e event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// candidate is one replica running client-go's elector.
type candidate struct {
	id     string
	db     *sql.DB
	lock   *sqllockk8slease.Lock
	cancel context.CancelFunc
	done   chan struct{}
}

// testOneLeader runs three candidates, each with a pool and a dialect of
// its own as separate processes would have, and takes the leader down
// rounds times, alternately as a crash (the elector stops, nothing is
// released: the lease ends when client-go stops renewing it) and as a
// graceful stop (the lease is released), starting a new candidate each
// time. Leaderships, bounded by the database clock's times of their start
// (after the election was won) and of their end (before the leader was
// stopped), must not overlap, must count one per round, and their terms
// must grow.
func testOneLeader(t *testing.T, open func(t *testing.T) (*sql.DB, dialect.Dialect), nowSQL string) {
	const rounds = 4
	_, d := open(t)
	if err := sqllock.Migrate(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	now := func(db *sql.DB) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var at int64
		if err := db.QueryRowContext(ctx, nowSQL).Scan(&at); err != nil {
			t.Errorf("read the database clock: %v", err)
		}
		return at
	}

	var h history
	started := make(chan *candidate, rounds+4)
	var all []*candidate
	start := func(id string) {
		db, d := open(t)
		e, err := sqllock.NewElection(d, sqllock.LeaseOptions{TTL: leaseDuration})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &candidate{id: id, db: db, lock: sqllockk8slease.New(e, "controller", id), cancel: cancel, done: make(chan struct{})}
		all = append(all, c)
		go func() {
			defer close(c.done)
			leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
				Lock:          c.lock,
				Name:          "controller",
				LeaseDuration: leaseDuration,
				RenewDeadline: renewDeadline,
				RetryPeriod:   retryPeriod,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) {
						var term int64
						if lead := c.lock.Leadership(); lead != nil {
							term = lead.Term()
						}
						h.add(event{identity: id, start: true, term: term, at: now(db)})
						started <- c
					},
					OnStoppedLeading: func() {},
				},
			})
		}()
	}
	defer func() {
		for _, c := range all {
			c.cancel()
			<-c.done
			if err := c.lock.Close(); err != nil {
				t.Errorf("%s: Close: %v", c.id, err)
			}
		}
	}()
	for i := range 3 {
		start(fmt.Sprintf("candidate-%d", i))
	}

	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for round := range rounds + 1 {
		var leader *candidate
		select {
		case leader = <-started:
		case <-deadline.C:
			t.Fatalf("round %d: no leader within the deadline", round)
		}
		if round == rounds {
			break
		}
		h.add(event{identity: leader.id, at: now(leader.db)})
		leader.cancel()
		<-leader.done
		if round%2 == 1 {
			// A graceful stop; otherwise a crash.
			if err := leader.lock.Close(); err != nil {
				t.Errorf("%s: Close: %v", leader.id, err)
			}
		}
		start(fmt.Sprintf("candidate-%d", 3+round))
	}

	h.mu.Lock()
	events := slices.Clone(h.events)
	h.mu.Unlock()
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	leader, starts, term := "", 0, int64(0)
	for _, e := range events {
		switch {
		case e.start && leader != "":
			t.Errorf("%s started leading at %d while %s led", e.identity, e.at, leader)
		case e.start && e.term <= term:
			t.Errorf("%s started leading with term %d, after term %d", e.identity, e.term, term)
		case !e.start && e.identity != leader:
			t.Errorf("%s stopped leading at %d while %q led", e.identity, e.at, leader)
		}
		if e.start {
			leader, term = e.identity, e.term
			starts++
		} else {
			leader = ""
		}
	}
	if starts != rounds+1 {
		t.Errorf("%d leaderships, want %d: %+v", starts, rounds+1, events)
	}
}

func TestOneLeaderPostgres(t *testing.T) {
	t.Parallel()
	tg := dbtest.NewTarget(t, "postgres")
	testOneLeader(t, func(t *testing.T) (*sql.DB, dialect.Dialect) { return migrated.Connect(t, tg) },
		"SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
}

func TestOneLeaderMySQL(t *testing.T) {
	t.Parallel()
	tg := dbtest.NewTarget(t, "mysql")
	testOneLeader(t, func(t *testing.T) (*sql.DB, dialect.Dialect) { return migrated.Connect(t, tg) },
		"SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)")
}
