// Package sqllockcron runs the jobs of github.com/robfig/cron/v3
// schedulers on one replica of many, through sqllock: wrap each job with
// SkipIfLockedElsewhere and a lock name of its own.
package sqllockcron

import (
	"context"

	"github.com/robfig/cron/v3"
	"github.com/sqllock/sqllock"
)

// SkipIfLockedElsewhere returns a cron.JobWrapper that runs a job only
// if the lock name is free: each run takes the lock with TryAcquire,
// runs the job while the lock is renewed, and releases it; a run that
// finds the lock held by another replica is skipped, and logged at Info
// level to logger. An error taking or releasing the lock is logged at
// Error level.
//
// Give locker a minimum hold (TableOptions.MinHold) a little below the
// job's period: a short job then keeps its lock after its end, until
// MinHold after the grant, and a replica whose schedule fires the same run
// later (by less than MinHold) skips it instead of running it again.
//
// The wrapped job has no context: it runs to its end even if the lock is
// lost meanwhile (the loss is logged by the release).
func SkipIfLockedElsewhere(locker sqllock.Locker, name string, logger cron.Logger) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			ran, err := sqllock.TryDo(context.Background(), locker, name, func(context.Context) error {
				j.Run()
				return nil
			})
			switch {
			case err != nil:
				logger.Error(err, "sqllockcron: lock", "name", name)
			case !ran:
				logger.Info("sqllockcron: skip, locked elsewhere", "name", name)
			}
		})
	}
}
