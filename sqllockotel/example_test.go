package sqllockotel_test

import (
	"context"
	"log"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/dialect"
	"github.com/sqllock/sqllock/rowlock"
	"github.com/sqllock/sqllock/sqllockotel"
)

// One Observer records the metrics and spans of a locker, a reaper and the
// transaction helper.
func ExampleNew() {
	ctx := context.Background()
	var d dialect.Dialect // postgres.New(db), say
	mp := sdkmetric.NewMeterProvider( /* sdkmetric.WithReader(your exporter) */ )
	tp := sdktrace.NewTracerProvider( /* sdktrace.WithBatcher(your exporter) */ )
	defer mp.Shutdown(ctx)
	defer tp.Shutdown(ctx)

	obs, err := sqllockotel.New(sqllockotel.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
	if err != nil {
		log.Fatal(err)
	}
	reaper, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	retry := rowlock.TxOptions{Retry: rowlock.RetryOptions{Observer: obs}} // for InTx
	_, _, _ = locker, reaper, retry
}
