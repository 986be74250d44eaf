package sqllockotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/observe"
	"github.com/sqllock/sqllock/sqllockotel"
	"github.com/sqllock/sqllock/tests/benchtest"
)

// BenchmarkTryAcquireRelease is the core's BenchmarkTryAcquireRelease with
// two more sides in the same run: a locker recording OpenTelemetry metrics
// and spans through the SDK (every span sampled, exported to nowhere),
// reported as otel-ns/op and ratio-otel = raw time / its time, and one
// recording metrics alone, ratio-metrics. Run:
//
//	go test -run '^$' -bench TryAcquireRelease -benchtime 3s ./sqllockotel/
func BenchmarkTryAcquireRelease(b *testing.B) {
	for _, kind := range benchtest.Kinds {
		db, d, raw := benchtest.OpenTable(b, kind)
		full, metrics := benchObservers(b)
		ops := []benchtest.TryAcquireRelease{raw}
		for _, o := range []observe.Observer{nil, full, metrics} {
			locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: o}})
			if err != nil {
				b.Fatal(err)
			}
			ops = append(ops, benchtest.Table(locker))
		}
		for _, run := range benchtest.Runs(b) {
			b.Run(kind+"/"+run.Name, func(b *testing.B) {
				db.SetMaxIdleConns(run.Clients + 2) // keep connections: no reconnects in any loop
				t := benchtest.Alternate(b, benchtest.Chunk, run.Clients, benchtest.Bind(run.Ctx, ops...)...)
				tRaw, tOurs, tOtel, tMetrics := t[0], t[1], t[2], t[3]
				benchtest.ReportRatio(b, tRaw, tOurs)
				b.ReportMetric(float64(tOtel.Nanoseconds())/float64(b.N), "otel-ns/op")
				b.ReportMetric(tRaw.Seconds()/tOtel.Seconds(), "ratio-otel")
				b.ReportMetric(tRaw.Seconds()/tMetrics.Seconds(), "ratio-metrics")
			})
		}
	}
}

// benchObservers returns two Observers recording through the OpenTelemetry
// SDK as a service would, except that nothing leaves the process: metrics
// aggregate for a reader that is never collected, and full samples every
// span and hands it, in batches, to an exporter that drops it; metrics has
// a no-op tracer. The providers shut down when b ends.
func benchObservers(b *testing.B) (full, metrics *sqllockotel.Observer) {
	b.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	full, err := sqllockotel.New(sqllockotel.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	metrics, err = sqllockotel.New(sqllockotel.Options{MeterProvider: mp, TracerProvider: tracenoop.NewTracerProvider()})
	if err != nil {
		b.Fatal(err)
	}
	return full, metrics
}
