package sqllock_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sqllock/sqllock"
	"github.com/sqllock/sqllock/sqllockotel"
)

// benchObserved are the observed lockers of BenchmarkTryAcquireRelease.
type benchObserved struct {
	full    *sqllock.Table // metrics and spans
	metrics *sqllock.Table // metrics alone
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
