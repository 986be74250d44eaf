package sqllock_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqllock/sqllock/sqllockotel"
)

// benchObserver returns an Observer recording through the OpenTelemetry
// SDK as a service would, except that nothing leaves the process: metrics
// aggregate for a reader that is never collected, and every span is sampled
// and handed, in batches, to an exporter that drops it. The providers shut
// down when b ends.
func benchObserver(b *testing.B) *sqllockotel.Observer {
	b.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := sqllockotel.New(sqllockotel.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	return obs
}
