package ledger_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqllock/sqllock/internal/testutil"
	"github.com/sqllock/sqllock/ledger"
)

func ok(context.Context, *ledger.Run) error { return nil }

func TestPauseResumeForget(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		const period = 5 * time.Millisecond
		if _, err := l.Pause(ctx, "tick"); !errors.Is(err, ledger.ErrUnknownJob) {
			t.Fatalf("Pause of an unknown job: %v", err)
		}
		if res, err := l.Run(ctx, "tick", ledger.Every(period), ok); err != nil || !res.Ran {
			t.Fatalf("%+v, %v", res, err)
		}
		if changed, err := l.Pause(ctx, "tick"); err != nil || !changed {
			t.Fatalf("Pause: %v, %v", changed, err)
		}
		// Paused: a Run makes no attempt, and says why.
		res, err := l.Run(ctx, "tick", ledger.Every(period), ok)
		if err != nil || res.Ran || res.State != ledger.StatePaused {
			t.Fatalf("paused Run: %+v, %v", res, err)
		}
		jobs, err := l.Jobs(ctx, "tick")
		if err != nil || len(jobs) != 1 || !jobs[0].Paused || jobs[0].Period != period {
			t.Fatalf("Jobs: %+v, %v", jobs, err)
		}
		// Nothing due while paused counts as missed, however long.
		pausedAt := jobs[0].PausedAt
		testutil.Eventually(ctx, t, "ten periods pass", func() bool { return dbNow(t, e).Sub(pausedAt) > 10*period })
		missed, err := l.Missed(ctx, "tick", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range missed {
			if !m.At.Before(pausedAt) {
				t.Fatalf("missed while paused (since %v): %+v", pausedAt, m)
			}
		}
		if changed, err := l.Resume(ctx, "tick"); err != nil || !changed {
			t.Fatalf("Resume: %v, %v", changed, err)
		}
		if changed, err := l.Resume(ctx, "tick"); err != nil || changed {
			t.Fatalf("a second Resume: %v, %v", changed, err)
		}
		// After the resume, unclaimed occurrences are missed again.
		testutil.Eventually(ctx, t, "a missed tick after the resume", func() bool {
			missed, err = l.Missed(ctx, "tick", 0)
			if err != nil {
				t.Fatal(err)
			}
			return len(missed) > 0 && !missed[len(missed)-1].At.Before(pausedAt)
		})
		sums := ledger.SumMissed(missed)
		if len(sums) != 1 || sums[0].Count != len(missed) || !sums[0].First.Equal(missed[0].At) || !sums[0].Last.Equal(missed[len(missed)-1].At) {
			t.Fatalf("SumMissed: %+v of %d", sums, len(missed))
		}
		// Forget: nothing missed any more, the attempts stay.
		if n, err := l.Forget(ctx, "tick", false); err != nil || n != 0 {
			t.Fatalf("Forget: %d, %v", n, err)
		}
		if missed, err := l.Missed(ctx, "", 0); err != nil || len(missed) != 0 {
			t.Fatalf("missed after Forget: %+v, %v", missed, err)
		}
		if runs, err := l.Runs(ctx, "tick", 10); err != nil || len(runs) != 1 {
			t.Fatalf("attempts after Forget: %+v, %v", runs, err)
		}
		if n, err := l.Forget(ctx, "tick", true); err != nil || n != 1 {
			t.Fatalf("Forget with attempts: %d, %v", n, err)
		}
		if _, err := l.Forget(ctx, "tick", false); !errors.Is(err, ledger.ErrUnknownJob) {
			t.Fatalf("Forget of a forgotten job: %v", err)
		}
	})
}

func TestScheduledClaimOnlyWhenDue(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		// An hourly job whose occurrence is a minute away (a phase set
		// from the database's time): too early to take.
		const period = time.Hour
		now := dbNow(t, e)
		phase := time.Duration((now.UnixMicro()+time.Minute.Microseconds())%period.Microseconds()) * time.Microsecond
		occ := ledger.Every(period).Phase(phase)
		res, err := l.Run(ctx, "hourly", occ, ok)
		if err != nil || res.Ran || res.State != ledger.StateNotDue || res.Next.Sub(now) < 50*time.Second {
			t.Fatalf("a minute early: %+v, %v", res, err)
		}
		if runs, err := l.Runs(ctx, "hourly", 1); err != nil || len(runs) != 0 {
			t.Fatalf("a refused claim wrote %+v, %v", runs, err)
		}
		// Within a tolerance of two minutes, it is taken early, and says
		// by how much.
		res, err = l.Run(ctx, "hourly", occ.Early(2*time.Minute), ok)
		if err != nil || !res.Ran || res.Early < 50*time.Second || res.Occurrence != res.Next.Format(ledger.TimeFormat) && !res.Next.IsZero() {
			t.Fatalf("with a tolerance: %+v, %v", res, err)
		}
		// A manual occurrence runs now, recorded apart, and uses up no
		// scheduled one.
		m, err := l.Run(ctx, "daily", ledger.Manual(), ok)
		if err != nil || !m.Ran || !m.Manual || !strings.HasPrefix(m.Occurrence, ledger.ManualPrefix) {
			t.Fatalf("Manual: %+v, %v", m, err)
		}
		day := ledger.Every(24 * time.Hour).Phase(time.Duration(dbNow(t, e).UnixMicro()%(24*time.Hour).Microseconds()) * time.Microsecond)
		if d, err := l.Run(ctx, "daily", day, ok); err != nil || !d.Ran || d.Manual {
			t.Fatalf("the scheduled occurrence after a manual one: %+v, %v", d, err)
		}
	})
}

func TestTriggerRunsOnceAcrossReplicas(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		if _, err := l.Trigger(ctx, "report"); !errors.Is(err, ledger.ErrUnknownJob) {
			t.Fatalf("Trigger of an unknown job: %v", err)
		}
		// An hourly schedule whose occurrence is due now, whatever the time.
		hourly := ledger.Every(time.Hour).Phase(time.Duration(dbNow(t, e).UnixMicro()%time.Hour.Microseconds()) * time.Microsecond)
		if res, err := l.Run(ctx, "report", hourly, ok); err != nil || !res.Ran {
			t.Fatalf("Run: %+v, %v", res, err)
		}
		if _, err := l.Pause(ctx, "report"); err != nil {
			t.Fatal(err)
		}
		key, err := l.Trigger(ctx, "report")
		if err != nil || !strings.HasPrefix(key, ledger.ManualPrefix) {
			t.Fatalf("Trigger: %q, %v", key, err)
		}
		if again, err := l.Trigger(ctx, "report"); err != nil || again != key {
			t.Fatalf("a second Trigger: %q, %v (pending %q)", again, err, key)
		}
		// Replicas see it pending (a paused job's scheduled Run too), and
		// it runs once across them, even paused.
		if res, err := l.Run(ctx, "report", hourly, ok); err != nil || res.Pending != key {
			t.Fatalf("Run sees %+v, %v", res, err)
		}
		var (
			ran atomic.Int32
			wg  sync.WaitGroup
		)
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.ledger(t, ledger.Options{Wait: true}).RunPending(ctx, "report", func(context.Context, *ledger.Run) error {
					ran.Add(1)
					return nil
				})
				if err != nil || (res.Occurrence != key && res.Occurrence != "") {
					t.Errorf("RunPending: %+v, %v", res, err)
				}
			}()
		}
		wg.Wait()
		if ran.Load() != 1 {
			t.Fatalf("the manual occurrence ran %d times", ran.Load())
		}
		if res, err := l.RunPending(ctx, "report", ok); err != nil || res.Occurrence != "" || res.Ran {
			t.Fatalf("RunPending with none pending: %+v, %v", res, err)
		}
		runs, err := l.Runs(ctx, "report", 10)
		if err != nil || len(runs) != 2 || runs[0].Occurrence != key || runs[0].State != ledger.StateSucceeded {
			t.Fatalf("runs: %+v, %v", runs, err)
		}
		// The schedule stays as it was.
		if jobs, err := l.Jobs(ctx, "report"); err != nil || jobs[0].Period != time.Hour || !jobs[0].Paused || jobs[0].Pending != "" {
			t.Fatalf("after the manual run: %+v, %v", jobs, err)
		}
	})
}

func TestCronOnTheDatabaseClock(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		// Every second: the occurrence is the database's second (or the
		// next, within the tolerance), recorded with the schedule.
		res, err := l.Run(ctx, "sec", ledger.Cron("* * * * * *", berlin), ok)
		if err != nil || !res.Ran {
			t.Fatalf("%+v, %v", res, err)
		}
		at, err := time.Parse(ledger.TimeFormat, res.Occurrence)
		if err != nil || at.Nanosecond() != 0 || dbNow(t, e).Sub(at) > time.Minute {
			t.Fatalf("occurrence %q: %v", res.Occurrence, err)
		}
		jobs, err := l.Jobs(ctx, "sec")
		if err != nil || len(jobs) != 1 || jobs[0].Cron != "* * * * * *" || jobs[0].Zone != "Europe/Berlin" {
			t.Fatalf("Jobs: %+v, %v", jobs, err)
		}
		testutil.Eventually(ctx, t, "missed seconds", func() bool {
			missed, err := l.Missed(ctx, "sec", 0)
			if err != nil {
				t.Fatal(err)
			}
			return len(missed) >= 1 && missed[0].Cron == "* * * * * *" && missed[0].At.After(at)
		})
		// A changed schedule is not missed for the old one.
		if _, err := l.Run(ctx, "sec", ledger.Cron("@yearly", berlin), ok); err != nil {
			t.Fatal(err)
		}
		if missed, err := l.Missed(ctx, "sec", 0); err != nil || len(missed) != 0 {
			t.Fatalf("after the schedule changed: %+v, %v", missed, err)
		}
		if _, err := l.Run(ctx, "bad", ledger.Cron("0 25 * * *", berlin), ok); err == nil || !strings.Contains(err.Error(), "hour field") {
			t.Fatalf("a bad hour: %v", err)
		}
	})
}

// A job whose first Run found nothing due is known all the same: it can be
// paused and triggered before it ever ran.
func TestNotDueJobIsKnown(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		l := e.ledger(t, ledger.Options{})
		// The hourly occurrence is half an hour away, whatever the time.
		half := time.Duration(dbNow(t, e).UnixMicro()%time.Hour.Microseconds())*time.Microsecond + 30*time.Minute
		res, err := l.Run(ctx, "later", ledger.Every(time.Hour).Phase(half%time.Hour), ok)
		if err != nil || res.Ran || res.State != ledger.StateNotDue {
			t.Fatalf("Run with nothing due: %+v, %v", res, err)
		}
		if _, err := l.Pause(ctx, "later"); err != nil {
			t.Fatalf("Pause of a job first seen when nothing was due: %v", err)
		}
	})
}

// changes records the job changes a ledger reports.
type changes struct {
	mu   sync.Mutex
	seen []ledger.JobChange
}

func (c *changes) JobChanged(_ context.Context, ch ledger.JobChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, ch)
}

// Each pause, resume, trigger and forget that changed a job is reported to
// a ChangedObserver, once; a call that changed nothing is not.
func TestChangedObserver(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := ctxT(t)
		obs := &changes{}
		l := e.ledger(t, ledger.Options{Observer: obs})
		if _, err := l.Run(ctx, "audited", ledger.Every(time.Hour), ok); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second of each changes nothing
			if _, err := l.Pause(ctx, "audited"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.Resume(ctx, "audited"); err != nil {
			t.Fatal(err)
		}
		key, err := l.Trigger(ctx, "audited")
		if err != nil {
			t.Fatal(err)
		}
		if again, err := l.Trigger(ctx, "audited"); err != nil || again != key {
			t.Fatalf("a second Trigger: %q, %v; want %q pending", again, err, key)
		}
		if res, err := l.RunPending(ctx, "audited", ok); err != nil || !res.Ran {
			t.Fatalf("RunPending: %+v, %v", res, err)
		}
		// The manual occurrence's attempt, and the scheduled one's if the
		// first Run found it due (the hour's first half).
		runs, err := l.Runs(ctx, "audited", 10)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Forget(ctx, "audited", true); err != nil {
			t.Fatal(err)
		}
		want := []ledger.JobChange{
			{Job: "audited", Change: ledger.ChangePaused},
			{Job: "audited", Change: ledger.ChangeResumed},
			{Job: "audited", Change: ledger.ChangeTriggered, Occurrence: key},
			{Job: "audited", Change: ledger.ChangeForgotten, Attempts: len(runs)},
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.seen) != len(want) {
			t.Fatalf("observed %+v, want %+v", obs.seen, want)
		}
		for i := range want {
			if obs.seen[i] != want[i] {
				t.Fatalf("change %d: %+v, want %+v", i, obs.seen[i], want[i])
			}
		}
	})
}
