package sqllock_test

import (
	"context"
	"log"
	"sync/atomic"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
)

// lossAlarm is an Observer without OpenTelemetry: it counts the locks
// lost, for a health check to report.
type lossAlarm struct{ lost atomic.Int64 }

func (a *lossAlarm) Acquired(context.Context, sqllock.AcquiredEvent) {}
func (a *lossAlarm) Released(context.Context, sqllock.ReleasedEvent) {}
func (a *lossAlarm) Lost(_ context.Context, e sqllock.LostEvent) {
	a.lost.Add(1)
	log.Printf("lost %s (token %d) after %v: %s", e.Name, e.Token, e.Held, e.Cause)
}

// An Observer receives a locker's acquisitions, releases and losses.
func ExampleObserver() {
	var d dialect.Dialect // postgres.New(db), say
	alarm := &lossAlarm{}
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{Observer: alarm})
	if err != nil {
		log.Fatal(err)
	}
	_ = locker
}
