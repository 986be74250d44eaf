package sqllockcron

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/sqllock/sqllock/ledger"
)

// maxLookBack bounds the search for a schedule's latest activation.
const maxLookBack = 2 * 366 * 24 * time.Hour

// OncePerScheduledTime returns a cron.JobWrapper that runs each scheduled
// run of a job once across replicas, through the run ledger l: the run is
// the occurrence of job keyed by its scheduled time (ledger.At), the
// latest activation of schedule at or before the moment the job starts.
// The first replica to start the run claims it and runs the job; the
// others skip it, logged at Info level to logger, however late their
// schedulers fire it (less than the schedule's next activation), and so
// does any later start of a run that succeeded. A replica that dies
// mid-run leaves its run to the next replica that starts it after the
// attempt's lease (ledger.Options.TTL) ended. Errors of the ledger are
// logged at Error level.
//
// schedule is the job's: the one given to cron.Cron.Schedule, or parsed
// from the spec given to AddJob (cron.ParseStandard). It must name wall
// clock times, so that every replica's scheduler computes the same ones:
// a cron.ConstantDelaySchedule ("@every 1h"), which counts from each
// scheduler's start, is refused with an error. For such a job, keep the
// period on the database's clock with ledger.Every instead.
//
// The wrapped job has no context and returns nothing: its run is recorded
// succeeded when it returns, and it runs to its end even if the lease is
// lost meanwhile.
func OncePerScheduledTime(l *ledger.Ledger, job string, schedule cron.Schedule, logger cron.Logger) (cron.JobWrapper, error) {
	if _, ok := schedule.(cron.ConstantDelaySchedule); ok {
		return nil, errors.New("sqllockcron: a constant delay schedule (@every) has no scheduled times common to the replicas: use ledger.Every")
	}
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			at, ok := lastActivation(schedule, time.Now())
			if !ok {
				logger.Error(fmt.Errorf("sqllockcron: no activation of the schedule in the last %v", maxLookBack), "sqllockcron: run", "job", job)
				return
			}
			res, err := l.Run(context.Background(), job, ledger.At(at), func(context.Context, *ledger.Run) error {
				j.Run()
				return nil
			})
			switch {
			case err != nil:
				logger.Error(err, "sqllockcron: run", "job", job, "occurrence", res.Occurrence)
			case !res.Ran:
				logger.Info("sqllockcron: skip", "job", job, "occurrence", res.Occurrence, "state", string(res.State))
			}
		})
	}, nil
}

// lastActivation returns the latest activation of s at or before now.
func lastActivation(s cron.Schedule, now time.Time) (time.Time, bool) {
	for back := time.Second; back <= maxLookBack; back *= 2 {
		t := s.Next(now.Add(-back))
		if t.IsZero() {
			return time.Time{}, false
		}
		if t.After(now) {
			continue
		}
		for n := s.Next(t); !n.IsZero() && !n.After(now); n = s.Next(n) {
			t = n
		}
		return t, true
	}
	return time.Time{}, false
}
