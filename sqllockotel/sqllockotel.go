// Package sqllockotel records sqllock's events as OpenTelemetry metrics and
// traces. It is a separate package so that programs that do not use
// OpenTelemetry never compile (or download) it: the core packages only
// define the event interfaces of package observe, all of which Observer
// implements.
//
//	obs, err := sqllockotel.New(sqllockotel.Options{}) // the global providers
//	locker, err := sqllock.NewTable(d, sqllock.TableOptions{LeaseOptions: sqllock.LeaseOptions{Observer: obs}})
//	reaper, err := sqllock.NewReaper(d, sqllock.ReaperOptions{Observer: obs})
//	err = rowlock.InTx(ctx, d, rowlock.TxOptions{Retry: rowlock.RetryOptions{Observer: obs}}, fn)
//	runs, err := ledger.New(d, ledger.Options{Observer: obs})
//
// One Observer serves any number of lockers, reapers and retry helpers; its
// metrics tell them apart by the attributes sqllock.strategy and
// sqllock.dialect. Lock names are added (as sqllock.lock.name) only when
// Options.LockNames asks for it, since a name per user or per order makes
// a metric's series unbounded; spans always carry them.
//
// The instruments, their units and attributes are listed in
// docs/observability.md, with what an alert on each means.
package sqllockotel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqllock/sqllock/ledger"
	"github.com/sqllock/sqllock/observe"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/sqllock/sqllock/sqllockotel"

// Attribute keys.
const (
	KeyStrategy = attribute.Key("sqllock.strategy")
	KeyDialect  = attribute.Key("sqllock.dialect")
	KeyName     = attribute.Key("sqllock.lock.name")
	KeyOutcome  = attribute.Key("sqllock.outcome")
	KeyMode     = attribute.Key("sqllock.mode") // "wait" (Acquire) or "try" (TryAcquire)
	KeyEnd      = attribute.Key("sqllock.end")  // how a hold ended: "released" or "lost"
	KeyCause    = attribute.Key("sqllock.cause")
	KeySource   = attribute.Key("sqllock.source")
	KeyOp       = attribute.Key("sqllock.op")
	KeyReason   = attribute.Key("sqllock.reason")
	KeyToken    = attribute.Key("sqllock.token")
	KeyJob      = attribute.Key("sqllock.job")       // a run ledger's job
	KeyState    = attribute.Key("sqllock.run.state") // a run's: succeeded, failed, abandoned, running
)

// Options configure an Observer. The zero value of each field selects its
// default.
type Options struct {
	// MeterProvider provides the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider provides the tracer. Default:
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// LockNames adds the lock name to the metrics about one lock (acquire
	// calls, waits, holds, hand-offs, renewals, losses). Leave it off when
	// names are unbounded.
	LockNames bool
}

// durationBuckets, in seconds, span a sub-millisecond acquire to an
// hour-long hold.
var durationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
}

// Observer records sqllock's events as OpenTelemetry metrics and spans. It
// implements every interface of package observe, and the run ledger's
// observers of finished, abandoned, skipped and missed runs (package
// ledger). It is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	names  bool

	attempts   metric.Int64Counter
	wait       metric.Float64Histogram
	hold       metric.Float64Histogram
	handoff    metric.Float64Histogram
	margin     metric.Float64Histogram
	renewals   metric.Int64Counter
	lost       metric.Int64Counter
	reaped     metric.Int64Counter
	reapTime   metric.Float64Histogram
	retries    metric.Int64Counter
	reconnects metric.Int64Counter
	listenLost metric.Int64Counter
	runs       metric.Int64Counter
	takeovers  metric.Int64Counter
	skipped    metric.Int64Counter
	broken     metric.Int64Counter
	revoked    metric.Int64Counter
	timedOut   metric.Int64Counter

	// Maps rather than sync.Maps: a sync.Map boxes its keys, one allocation
	// per look-up.
	mu       sync.RWMutex
	gauges   map[gaugeKey]*gaugeSet
	attrSets map[attrKey]*attrOpts    // see lockAttrs
	missed   map[string]*atomic.Int64 // by run ledger job
	health   map[string]*jobHealth    // by run ledger job
}

// jobHealth holds the gauges of a run ledger job's health, as its last
// check (Ledger.Health) found it.
type jobHealth struct {
	streak, failing, late atomic.Int64
}

var (
	_ observe.AcquiredObserver = (*Observer)(nil)
	_ observe.ReleasedObserver = (*Observer)(nil)
	_ observe.LostObserver     = (*Observer)(nil)
	_ observe.AcquireTracer    = (*Observer)(nil)
	_ observe.ReleaseTracer    = (*Observer)(nil)
	_ observe.GuardTracer      = (*Observer)(nil)
	_ observe.HandoffObserver  = (*Observer)(nil)
	_ observe.WaitingObserver  = (*Observer)(nil)
	_ observe.RenewedObserver  = (*Observer)(nil)
	_ observe.RenewBatchTracer = (*Observer)(nil)
	_ observe.ListenerObserver = (*Observer)(nil)
	_ observe.ReapObserver     = (*Observer)(nil)
	_ observe.AttemptTracer    = (*Observer)(nil)
	_ observe.RevokedObserver  = (*Observer)(nil)
	_ ledger.FinishedObserver  = (*Observer)(nil)
	_ ledger.AbandonedObserver = (*Observer)(nil)
	_ ledger.SkippedObserver   = (*Observer)(nil)
	_ ledger.MissedObserver    = (*Observer)(nil)
	_ ledger.HealthObserver    = (*Observer)(nil)
	_ observe.BreakObserver    = (*Observer)(nil)
)

type gaugeKey struct{ strategy, dialect string }

// gaugeSet holds the current values of the gauges of one (strategy,
// dialect), kept up to date by events.
type gaugeSet struct {
	attrs   attribute.Set
	held    atomic.Int64 // acquisitions held
	waiting atomic.Int64 // waiting heads
	up      atomic.Int64 // waiting rooms whose listening connection is up
}

// New returns an Observer whose instruments are created on the meter
// provider of opts.
func New(opts Options) (*Observer, error) {
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(ScopeName)
	o := &Observer{tracer: tp.Tracer(ScopeName), names: opts.LockNames,
		gauges: make(map[gaugeKey]*gaugeSet), attrSets: make(map[attrKey]*attrOpts), missed: make(map[string]*atomic.Int64),
		health: make(map[string]*jobHealth)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	o.attempts = counter("sqllock.acquire.calls", "{call}", "Acquire and TryAcquire calls, by outcome (acquired, busy, error).")
	o.wait = histogram("sqllock.acquire.duration", "Time an Acquire or TryAcquire call took, by outcome: for Acquire, the wait for the lock.")
	o.hold = histogram("sqllock.lock.held", "Time from an acquisition to its release or loss.")
	o.handoff = histogram("sqllock.handoff.latency", "Time from a release reaching a locker (source local: released through the same locker; notice: announced by the database) to the grant to a waiter it woke.")
	o.margin = histogram("sqllock.lease.margin", "Time left in the trust window when a lease renewal succeeded.")
	o.renewals = counter("sqllock.lease.renewals", "{renewal}", "Lease renewals, by outcome (renewed, failed, refused).")
	o.lost = counter("sqllock.lock.lost", "{lock}", "Acquisitions lost, by cause.")
	o.reaped = counter("sqllock.reaper.deleted", "{row}", "Rows deleted by reaper passes.")
	o.reapTime = histogram("sqllock.reaper.duration", "Time a reaper pass took, by outcome (ok, error).")
	o.retries = counter("sqllock.retries", "{retry}", "Runs of InTx's or RetryOnConflict's function followed by another, by operation and reason.")
	o.reconnects = counter("sqllock.listener.reconnects", "{connection}", "Listening connections that came up again after being lost.")
	o.listenLost = counter("sqllock.listener.losses", "{connection}", "Listening connections lost.")
	o.runs = counter("sqllock.runs", "{run}", "Attempts of run ledger occurrences, by job and state: succeeded and failed as recorded by their runners; abandoned as taken over after their runner died.")
	o.takeovers = counter("sqllock.run.takeovers", "{run}", "Attempts of a run ledger's job whose runner died mid-run, taken over by a later attempt, by job.")
	o.skipped = counter("sqllock.runs.skipped", "{call}", "Run ledger calls that ran nothing, by job and the occurrence's state (succeeded: done; running: elsewhere; failed: no attempt left).")
	o.broken = counter("sqllock.lock.broken", "{lock}", "Leases ended by a break (Table.Break, sqllock unlock).")
	o.revoked = counter("sqllock.lock.revoked", "{lock}", "Held leases whose holders learnt that their release was requested (Table.RequestRelease, sqllock unlock --ask).")
	o.timedOut = counter("sqllock.runs.timed_out", "{run}", "Attempts of run ledger occurrences recorded failed because they ran past their max runtime, by job (counted among sqllock.runs as failed too).")

	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	held := gauge("sqllock.locks.held", "{lock}", "Acquisitions held in this process.")
	waiting := gauge("sqllock.waiters", "{call}", "Acquire calls waiting: the heads of the waiting rooms (lease strategies), the calls in the database's lock queue (pessimistic).")
	up := gauge("sqllock.listener.up", "{connection}", "Waiting rooms whose listening connection delivers announcements.")
	missed := gauge("sqllock.runs.missed", "{occurrence}", "Occurrences of a run ledger's periodic job that no replica claimed within the grace time, as the last check of the job found them.")
	streak := gauge("sqllock.runs.failing_streak", "{attempt}", "A run ledger job's latest finished attempts that failed or were abandoned, in a row, as the last health check of the job found them.")
	failing := gauge("sqllock.runs.failing", "{job}", "1 while a run ledger job is failing by the health check's thresholds (failed FailAfter times in a row, not recovered by RecoverAfter successes), else 0.")
	late := gauge("sqllock.runs.late", "{job}", "1 while a run ledger job's latest due occurrence is unclaimed inside its grace, as the last health check found it, else 0.")
	_, err := m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		o.mu.RLock()
		defer o.mu.RUnlock()
		for _, g := range o.gauges {
			set := metric.WithAttributeSet(g.attrs)
			obs.ObserveInt64(held, g.held.Load(), set)
			obs.ObserveInt64(waiting, g.waiting.Load(), set)
			obs.ObserveInt64(up, g.up.Load(), set)
		}
		for job, n := range o.missed {
			obs.ObserveInt64(missed, n.Load(), metric.WithAttributes(KeyJob.String(job)))
		}
		for job, h := range o.health {
			set := metric.WithAttributes(KeyJob.String(job))
			obs.ObserveInt64(streak, h.streak.Load(), set)
			obs.ObserveInt64(failing, h.failing.Load(), set)
			obs.ObserveInt64(late, h.late.Load(), set)
		}
		return nil
	}, held, waiting, up, missed, streak, failing, late)
	errs = append(errs, err)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

func (o *Observer) gaugeSet(strategy, dialect string) *gaugeSet {
	k := gaugeKey{strategy, dialect}
	o.mu.RLock()
	g := o.gauges[k]
	o.mu.RUnlock()
	if g != nil {
		return g
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if g = o.gauges[k]; g == nil {
		g = &gaugeSet{attrs: attribute.NewSet(KeyStrategy.String(strategy), KeyDialect.String(dialect))}
		o.gauges[k] = g
	}
	return g
}

// attrKey identifies a set of metric attributes without a lock name: the
// strategy, the dialect and up to two more string attributes.
type attrKey struct {
	strategy, dialect string
	k1, k2            attribute.Key
	v1, v2            string
}

// attrOpts are one attribute set as the options of Add and Record: made
// once, they spare each measurement the allocation of its variadic options.
type attrOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// lockAttrs returns the attributes of a metric about one lock: strategy,
// dialect, the name if Options.LockNames asks for it, and k1=v1, k2=v2
// unless their keys are empty. Without names, the few sets there are, are
// made once.
func (o *Observer) lockAttrs(strategy, dialect, name string, k1 attribute.Key, v1 string, k2 attribute.Key, v2 string) *attrOpts {
	key := attrKey{strategy: strategy, dialect: dialect, k1: k1, v1: v1, k2: k2, v2: v2}
	if !o.names {
		o.mu.RLock()
		opt, ok := o.attrSets[key]
		o.mu.RUnlock()
		if ok {
			return opt
		}
	}
	kv := make([]attribute.KeyValue, 0, 5)
	kv = append(kv, KeyStrategy.String(strategy), KeyDialect.String(dialect))
	if o.names {
		kv = append(kv, KeyName.String(name))
	}
	if k1 != "" {
		kv = append(kv, k1.String(v1))
	}
	if k2 != "" {
		kv = append(kv, k2.String(v2))
	}
	set := metric.WithAttributeSet(attribute.NewSet(kv...))
	opt := &attrOpts{add: []metric.AddOption{set}, rec: []metric.RecordOption{set}}
	if !o.names {
		o.mu.Lock()
		o.attrSets[key] = opt
		o.mu.Unlock()
	}
	return opt
}

// startLockSpan starts a span about one lock. Attributes are set only on a
// span that records: an unsampled span (or a no-op tracer) costs nothing
// more.
func (o *Observer) startLockSpan(ctx context.Context, name string, e observe.LockEvent) (context.Context, trace.Span) {
	ctx, span := o.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(KeyStrategy.String(e.Strategy), KeyDialect.String(e.Dialect),
			KeyName.String(e.Name), KeyToken.Int64(e.Token))
	}
	return ctx, span
}

// endSpan ends ctx's span, with err as its status.
func endSpan(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func mode(wait bool) string {
	if wait {
		return "wait"
	}
	return "try"
}

// Acquired implements observe.AcquiredObserver: it counts the acquisition
// as held.
func (o *Observer) Acquired(_ context.Context, e observe.AcquiredEvent) {
	if !e.Reentered {
		o.gaugeSet(e.Strategy, e.Dialect).held.Add(1)
	}
}

// Released implements observe.ReleasedObserver: it records the hold time
// of a freed acquisition.
func (o *Observer) Released(ctx context.Context, e observe.ReleasedEvent) {
	if !e.Freed {
		return
	}
	o.gaugeSet(e.Strategy, e.Dialect).held.Add(-1)
	o.hold.Record(ctx, e.Held.Seconds(), o.lockAttrs(e.Strategy, e.Dialect, e.Name, KeyEnd, "released", "", "").rec...)
}

// Lost implements observe.LostObserver: it counts the loss, records the hold
// time, and records a span (a child of the acquiring call's parent span).
func (o *Observer) Lost(ctx context.Context, e observe.LostEvent) {
	o.gaugeSet(e.Strategy, e.Dialect).held.Add(-1)
	o.lost.Add(ctx, 1, o.lockAttrs(e.Strategy, e.Dialect, e.Name, KeyCause, string(e.Cause), "", "").add...)
	o.hold.Record(ctx, e.Held.Seconds(), o.lockAttrs(e.Strategy, e.Dialect, e.Name, KeyEnd, "lost", "", "").rec...)
	_, span := o.startLockSpan(ctx, "sqllock.lost", e.LockEvent)
	span.SetAttributes(KeyCause.String(string(e.Cause)), attribute.String("sqllock.reason", e.Reason),
		attribute.Float64("sqllock.held", e.Held.Seconds()))
	span.SetStatus(codes.Error, e.Reason)
	span.End()
}

// StartAcquire implements observe.AcquireTracer.
func (o *Observer) StartAcquire(ctx context.Context, e observe.AcquireStart) context.Context {
	ctx, span := o.tracer.Start(ctx, "sqllock.acquire")
	if !span.IsRecording() {
		return ctx
	}
	if e.Shared {
		span.SetAttributes(KeyStrategy.String(e.Strategy), KeyDialect.String(e.Dialect), KeyName.String(e.Name),
			KeyMode.String(mode(e.Wait)), attribute.Bool("sqllock.shared", true))
	} else {
		span.SetAttributes(KeyStrategy.String(e.Strategy), KeyDialect.String(e.Dialect), KeyName.String(e.Name),
			KeyMode.String(mode(e.Wait)))
	}
	return ctx
}

// EndAcquire implements observe.AcquireTracer.
func (o *Observer) EndAcquire(ctx context.Context, e observe.AcquireEnd) {
	attrs := o.lockAttrs(e.Strategy, e.Dialect, e.Name, KeyOutcome, string(e.Outcome), KeyMode, mode(e.Wait))
	o.attempts.Add(ctx, 1, attrs.add...)
	o.wait.Record(ctx, e.Duration.Seconds(), attrs.rec...)
	// One SetAttributes call: each costs the SDK a de-duplication pass.
	// The span's own length is the wait.
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		if e.Outcome == observe.OutcomeAcquired {
			span.SetAttributes(KeyOutcome.String(string(e.Outcome)), KeyToken.Int64(e.Token))
		} else {
			span.SetAttributes(KeyOutcome.String(string(e.Outcome)))
		}
	}
	var err error
	if e.Outcome == observe.OutcomeError {
		err = e.Err
	}
	endSpan(ctx, err)
}

// Handoff implements observe.HandoffObserver.
func (o *Observer) Handoff(ctx context.Context, e observe.HandoffEvent) {
	o.handoff.Record(ctx, e.Latency.Seconds(), o.lockAttrs(e.Strategy, e.Dialect, e.Name, KeySource, e.Source, "", "").rec...)
	trace.SpanFromContext(ctx).AddEvent("sqllock.handoff", trace.WithAttributes(KeySource.String(e.Source),
		attribute.Float64("sqllock.latency", e.Latency.Seconds())))
}

// Waiting implements observe.WaitingObserver.
func (o *Observer) Waiting(_ context.Context, e observe.WaitingEvent) {
	o.gaugeSet(e.Strategy, e.Dialect).waiting.Add(int64(e.Delta))
}

// StartRelease implements observe.ReleaseTracer.
func (o *Observer) StartRelease(ctx context.Context, e observe.LockEvent) context.Context {
	ctx, _ = o.startLockSpan(ctx, "sqllock.release", e)
	return ctx
}

// EndRelease implements observe.ReleaseTracer.
func (o *Observer) EndRelease(ctx context.Context, _ observe.LockEvent, err error) { endSpan(ctx, err) }

// StartGuard implements observe.GuardTracer.
func (o *Observer) StartGuard(ctx context.Context, e observe.LockEvent) context.Context {
	ctx, _ = o.startLockSpan(ctx, "sqllock.guard", e)
	return ctx
}

// EndGuard implements observe.GuardTracer.
func (o *Observer) EndGuard(ctx context.Context, _ observe.LockEvent, err error) { endSpan(ctx, err) }

// Renewed implements observe.RenewedObserver.
func (o *Observer) Renewed(ctx context.Context, e observe.RenewedEvent) {
	o.renewals.Add(ctx, 1, o.lockAttrs(e.Strategy, e.Dialect, e.Name, KeyOutcome, string(e.Outcome), "", "").add...)
	if e.Outcome == observe.RenewOK {
		o.margin.Record(ctx, e.Margin.Seconds(), o.lockAttrs(e.Strategy, e.Dialect, e.Name, "", "", "", "").rec...)
	}
}

// StartRenewBatch implements observe.RenewBatchTracer: the batch's span is
// a root span (background work), linked to the spans the leases were
// acquired under.
func (o *Observer) StartRenewBatch(ctx context.Context, e observe.RenewBatch) context.Context {
	var links []trace.Link
	for _, c := range e.Leases {
		if sc := trace.SpanContextFromContext(c); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, _ = o.tracer.Start(ctx, "sqllock.renew", trace.WithLinks(links...), trace.WithAttributes(KeyStrategy.String(e.Strategy),
		KeyDialect.String(e.Dialect), attribute.Int("sqllock.batch.size", e.Size)))
	return ctx
}

// EndRenewBatch implements observe.RenewBatchTracer.
func (o *Observer) EndRenewBatch(ctx context.Context, _ observe.RenewBatch, err error) {
	endSpan(ctx, err)
}

// Listening implements observe.ListenerObserver.
func (o *Observer) Listening(ctx context.Context, e observe.ListenerEvent) {
	g := o.gaugeSet(e.Strategy, e.Dialect)
	attrs := metric.WithAttributeSet(g.attrs)
	switch {
	case e.Up:
		g.up.Add(1)
		if e.Reconnect {
			o.reconnects.Add(ctx, 1, attrs)
		}
	default:
		g.up.Add(-1)
		if e.Err != nil {
			o.listenLost.Add(ctx, 1, attrs)
		}
	}
}

// Reaped implements observe.ReapObserver: it counts the rows, records the
// pass's duration and a span covering it.
func (o *Observer) Reaped(ctx context.Context, e observe.ReapEvent) {
	outcome := "ok"
	if e.Err != nil {
		outcome = "error"
	}
	o.reaped.Add(ctx, int64(e.Deleted), metric.WithAttributes(KeyDialect.String(e.Dialect)))
	o.reapTime.Record(ctx, e.Took.Seconds(), metric.WithAttributes(KeyDialect.String(e.Dialect), KeyOutcome.String(outcome)))
	end := time.Now()
	_, span := o.tracer.Start(ctx, "sqllock.reap", trace.WithTimestamp(end.Add(-e.Took)),
		trace.WithAttributes(KeyDialect.String(e.Dialect), attribute.Int("sqllock.deleted", e.Deleted)))
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// StartAttempt implements observe.AttemptTracer.
func (o *Observer) StartAttempt(ctx context.Context, e observe.Attempt) context.Context {
	ctx, _ = o.tracer.Start(ctx, "sqllock."+e.Op+".attempt", trace.WithAttributes(KeyOp.String(e.Op),
		attribute.Int("sqllock.attempt", e.Attempt)))
	return ctx
}

// EndAttempt implements observe.AttemptTracer.
func (o *Observer) EndAttempt(ctx context.Context, e observe.AttemptEnd) {
	if e.Retry != "" {
		o.retries.Add(ctx, 1, metric.WithAttributes(KeyOp.String(e.Op), KeyReason.String(e.Retry)))
		trace.SpanFromContext(ctx).SetAttributes(KeyReason.String(e.Retry))
	}
	endSpan(ctx, e.Err)
}

// runAttrs are the attributes of a metric about a run ledger's job: the job
// (jobs are few: a name per job, not per run) and the state, if not "".
func runAttrs(job string, state ledger.State) metric.MeasurementOption {
	if state == "" {
		return metric.WithAttributeSet(attribute.NewSet(KeyJob.String(job)))
	}
	return metric.WithAttributeSet(attribute.NewSet(KeyJob.String(job), KeyState.String(string(state))))
}

// RunFinished implements ledger.FinishedObserver: it counts the attempt by
// its recorded state (succeeded or failed), and among the timed out if it
// ran past its max runtime.
func (o *Observer) RunFinished(ctx context.Context, e ledger.Event) {
	o.runs.Add(ctx, 1, runAttrs(e.Job, e.State))
	if errors.Is(e.Err, ledger.ErrTimedOut) {
		o.timedOut.Add(ctx, 1, runAttrs(e.Job, ""))
	}
}

// RunAbandoned implements ledger.AbandonedObserver: it counts the
// abandoned attempt among the runs, and the takeover.
func (o *Observer) RunAbandoned(ctx context.Context, e ledger.Event, _ ledger.Event) {
	o.runs.Add(ctx, 1, runAttrs(e.Job, ledger.StateAbandoned))
	o.takeovers.Add(ctx, 1, runAttrs(e.Job, ""))
}

// RunSkipped implements ledger.SkippedObserver.
func (o *Observer) RunSkipped(ctx context.Context, e ledger.Event) {
	o.skipped.Add(ctx, 1, runAttrs(e.Job, e.State))
}

// RunsMissed implements ledger.MissedObserver: the job's gauge of missed
// occurrences takes the check's count.
func (o *Observer) RunsMissed(_ context.Context, job string, missed []ledger.MissedRun) {
	o.mu.RLock()
	n := o.missed[job]
	o.mu.RUnlock()
	if n == nil {
		o.mu.Lock()
		if n = o.missed[job]; n == nil {
			n = new(atomic.Int64)
			o.missed[job] = n
		}
		o.mu.Unlock()
	}
	n.Store(int64(len(missed)))
}

// JobHealth implements ledger.HealthObserver: the job's gauges of health
// take the check's values.
func (o *Observer) JobHealth(_ context.Context, h ledger.JobHealth) {
	o.mu.RLock()
	g := o.health[h.Job]
	o.mu.RUnlock()
	if g == nil {
		o.mu.Lock()
		if g = o.health[h.Job]; g == nil {
			g = new(jobHealth)
			o.health[h.Job] = g
		}
		o.mu.Unlock()
	}
	g.streak.Store(int64(h.Failed))
	g.failing.Store(b2i(h.Failing))
	g.late.Store(b2i(h.Late != nil))
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// Revoked implements observe.RevokedObserver: it counts the request, and
// records a span for the audit trail.
func (o *Observer) Revoked(ctx context.Context, e observe.RevokedEvent) {
	o.revoked.Add(ctx, 1, o.lockAttrs(e.Strategy, e.Dialect, e.Name, "", "", "", "").add...)
	_, span := o.startLockSpan(ctx, "sqllock.revoked", e.LockEvent)
	span.SetAttributes(attribute.String("sqllock.owner", e.Owner), attribute.String("sqllock.reason", e.Reason),
		attribute.Float64("sqllock.held", e.Held.Seconds()))
	span.End()
}

// Broken implements observe.BreakObserver: it counts the break, and records
// a span for the audit trail.
func (o *Observer) Broken(ctx context.Context, e observe.BrokenEvent) {
	o.broken.Add(ctx, 1, o.lockAttrs(e.Strategy, e.Dialect, e.Name, "", "", "", "").add...)
	_, span := o.startLockSpan(ctx, "sqllock.break", e.LockEvent)
	span.SetAttributes(attribute.String("sqllock.owner", e.Owner), attribute.Int("sqllock.holds", e.Holds),
		attribute.Float64("sqllock.left", e.Left.Seconds()))
	span.End()
}
