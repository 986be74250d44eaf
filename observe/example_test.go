package observe_test

import (
	"context"
	"log"
	"sync/atomic"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/observe"
)

// lossAlarm counts the locks lost, for a health check to report. It cares
// for one event only, so it implements one interface.
type lossAlarm struct{ lost atomic.Int64 }

func (a *lossAlarm) Lost(_ context.Context, e observe.LostEvent) {
	a.lost.Add(1)
	log.Printf("lost %s (token %d) after %v: %s", e.Name, e.Token, e.Held, e.Cause)
}

// An observer without OpenTelemetry implements the interfaces of the events
// it cares about: here, a lock's loss.
func ExampleLostObserver() {
	var d dialect.Dialect // postgres.New(db), say
	alarm := &lossAlarm{}
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: alarm}})
	if err != nil {
		log.Fatal(err)
	}
	_ = locker
}
