package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

// crashed leaves what a runner that died mid-run leaves: a running
// attempt of (job, key) under a lease that nobody renews, which expires
// on its own. It returns the lease's token. The lease's TTL starts short,
// and doubles each time it expired before the attempt was recorded (a
// slow machine).
func crashed(t *testing.T, e *env, job, key string) int64 {
	t.Helper()
	ctx := ctxT(t)
	cat := testutil.Tables(t, e.d)
	lease := dialect.Lease{Name: "run/" + job + "/" + key, Owner: "ghost"}
	for ttl := 20 * time.Millisecond; ; ttl *= 2 {
		var err error
		lease.Token, err = cat.Locks.Acquire(ctx, dialect.AcquireParams{Name: lease.Name, Owner: lease.Owner, TTL: ttl})
		if err != nil || lease.Token == 0 {
			t.Fatalf("ghost's lease: %d, %v", lease.Token, err)
		}
		tx, err := e.d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := cat.Locks.Guard(ctx, tx, lease)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			_ = tx.Rollback()
			continue
		}
		rec := dialect.RunRecord{Job: job, Occurrence: key, Attempt: 1, Owner: lease.Owner, Token: lease.Token}
		if err := cat.Runs.Start(ctx, tx, rec, dialect.JobSchedule{Job: job}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return lease.Token
	}
}

func TestTakeOverADeadRunner(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		ghost := crashed(t, e, "nightly", "k")
		// Without Wait a replica may come before the lease has expired;
		// with it, the replica waits for the expiry and takes over.
		res, err := e.ledger(t, ledger.Options{Wait: true}).Run(ctx, "nightly", ledger.Key("k"),
			func(ctx context.Context, r *ledger.Run) error {
				if r.Attempt != 2 || r.Token <= ghost {
					t.Errorf("took over as %+v after the ghost's token %d", r, ghost)
				}
				return nil
			})
		if err != nil || !res.Ran || res.State != ledger.StateSucceeded || res.Attempt != 2 {
			t.Fatalf("%+v, %v", res, err)
		}
		runs, err := e.ledger(t, ledger.Options{}).Runs(ctx, "nightly", 10)
		if err != nil || len(runs) != 2 {
			t.Fatalf("Runs: %+v, %v", runs, err)
		}
		if g := runs[1]; g.State != ledger.StateAbandoned || g.Owner != "ghost" || g.Token != ghost || g.FinishedAt.IsZero() {
			t.Fatalf("the dead attempt: %+v", g)
		}
	})
}

func TestAbandonedAttemptsDoNotCountAsFailures(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		crashed(t, e, "job", "k")
		res, err := e.ledger(t, ledger.Options{Wait: true}).Run(ctx, "job", ledger.Key("k"),
			func(context.Context, *ledger.Run) error { return errBoom })
		if !errors.Is(err, errBoom) || res.Attempt != 2 || res.State != ledger.StateFailed {
			t.Fatalf("%+v, %v", res, err)
		}
	})
}

// breakLease ends the lease on name, as an operator would (sqllock
// unlock): its holder's renewals and guards fail from then on.
func breakLease(t *testing.T, e *env, name string) {
	t.Helper()
	tbl, err := sqllock.NewTable(e.d, sqllock.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := tbl.Break(ctxT(t), name); err != nil || !ok {
		t.Fatalf("break %s: %v, %v", name, ok, err)
	}
}

func TestLateWritesOfALostAttemptAreRefused(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		started, lost, resume := make(chan struct{}), make(chan struct{}), make(chan struct{})
		type outcome struct {
			res ledger.Result
			err error
		}
		first := make(chan outcome, 1)
		go func() {
			l := e.ledger(t, ledger.Options{TTL: 3 * time.Second})
			res, err := l.Run(ctx, "report", ledger.Key("k"), func(ctx context.Context, r *ledger.Run) error {
				close(started)
				<-ctx.Done() // the lease is ended under it
				if !errors.Is(context.Cause(ctx), sqllock.ErrLockLost) {
					t.Errorf("fn's ctx ended with %v", context.Cause(ctx))
				}
				close(lost)
				<-resume
				// Its own guarded write is refused.
				tx, err := e.d.DB().BeginTx(context.WithoutCancel(ctx), nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if err := r.Guard(context.WithoutCancel(ctx), tx); !errors.Is(err, sqllock.ErrLockLost) {
					t.Errorf("a lost attempt's Guard: %v", err)
				}
				return nil // it believes it succeeded
			})
			first <- outcome{res, err}
		}()
		select {
		case <-started:
		case o := <-first:
			t.Fatalf("the first attempt ended before it ran: %+v, %v", o.res, o.err)
		}
		breakLease(t, e, "run/report/k")
		select {
		case <-lost:
		case o := <-first:
			t.Fatalf("the first attempt ended before its lease did: %+v, %v", o.res, o.err)
		}
		res, err := e.ledger(t, ledger.Options{}).Run(ctx, "report", ledger.Key("k"),
			func(context.Context, *ledger.Run) error { return nil })
		if err != nil || res.State != ledger.StateSucceeded || res.Attempt != 2 {
			t.Fatalf("the takeover: %+v, %v", res, err)
		}
		close(resume)
		o := <-first
		if !errors.Is(o.err, sqllock.ErrLockLost) || o.res.State != ledger.StateAbandoned || !o.res.Ran {
			t.Fatalf("the lost attempt: %+v, %v", o.res, o.err)
		}
		runs, err := e.ledger(t, ledger.Options{}).Runs(ctx, "report", 10)
		if err != nil || len(runs) != 2 || runs[0].State != ledger.StateSucceeded || runs[1].State != ledger.StateAbandoned {
			t.Fatalf("Runs: %+v, %v", runs, err)
		}
	})
}

// A runner of a scheduled occurrence that died holds, beside the
// occurrence's lease, the job's lease (overlap skip, the default), renewed
// with it and ending a moment later. A replica that takes the occurrence
// over inside that moment runs it: the job's lease is the dead runner's,
// not another occurrence's, so nothing overlaps and nothing is skipped.
func TestTakeOverBeforeTheJobLeaseEnds(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		// A daily schedule whose occurrence is the database's present, due
		// whatever the time of day; the key it resolves to now, taken on a
		// job of its own.
		occ := ledger.Every(24 * time.Hour).Phase(time.Duration(dbNow(t, e).UnixMicro()%(24*time.Hour).Microseconds()) * time.Microsecond)
		probe, err := e.ledger(t, ledger.Options{}).Run(ctx, "probe", occ, ok)
		if err != nil || !probe.Ran {
			t.Fatalf("probe: %+v, %v", probe, err)
		}
		// The ghost takes the job's lease before its attempt starts, as a
		// runner does; here it outlives its lease on the occurrence by
		// far: the moment, stretched.
		cat := testutil.Tables(t, e.d)
		if tok, err := cat.Locks.Acquire(ctx, dialect.AcquireParams{Name: "run-job/nightly", Owner: "ghost", TTL: time.Hour}); err != nil || tok == 0 {
			t.Fatalf("the ghost's job lease: %d, %v", tok, err)
		}
		ghost := crashed(t, e, "nightly", probe.Occurrence)
		res, err := e.ledger(t, ledger.Options{Wait: true}).Run(ctx, "nightly", occ, ok)
		if err != nil || !res.Ran || res.State != ledger.StateSucceeded || res.Occurrence != probe.Occurrence || res.Attempt != 2 || res.Token <= ghost {
			t.Fatalf("the takeover: %+v, %v; want %s run as attempt 2", res, err, probe.Occurrence)
		}
		// Another occurrence's live job lease still makes a Run skip.
		if tok, err := cat.Locks.Acquire(ctx, dialect.AcquireParams{Name: "run-job/other", Owner: "live", TTL: time.Hour}); err != nil || tok == 0 {
			t.Fatalf("a live job lease: %d, %v", tok, err)
		}
		if res, err := e.ledger(t, ledger.Options{}).Run(ctx, "other", occ, ok); err != nil || res.Ran || res.State != ledger.StateSkipped {
			t.Fatalf("a Run beside a live job lease: %+v, %v; want skipped", res, err)
		}
	})
}
