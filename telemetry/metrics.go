package telemetry

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
)

// Metric names; docs/tracing.md lists them with their attributes.
const (
	MetricReflectorEvents = "actorinformer.reflector.events"
	MetricRelists         = "actorinformer.reflector.relists"
	MetricWatchRestarts   = "actorinformer.reflector.watch.restarts"
	MetricWatchErrors     = "actorinformer.reflector.watch.errors"
	MetricDropped         = "actorinformer.reflector.dropped"
	MetricQueueIn         = "actorinformer.fifo.events.in"
	MetricQueueOut        = "actorinformer.fifo.events.out"
	MetricQueueMerged     = "actorinformer.fifo.merged"
	MetricQueueBacklog    = "actorinformer.fifo.backlog"
	MetricIndexerEvents   = "actorinformer.indexer.events"
	MetricListenerEvents  = "actorinformer.listener.events"
	MetricListenerBacklog = "actorinformer.listener.backlog"
	MetricHandlerDuration = "actorinformer.handler.duration"
	MetricHandlerEventAge = "actorinformer.handler.event_age"
	MetricListDuration    = "actorinformer.reflector.list.duration"
	// MetricWatchListWaiting is 1 while a WatchList stream waits for its
	// initial-events-end bookmark, else 0.
	MetricWatchListWaiting = "actorinformer.reflector.watchlist.waiting"
	MetricCacheSize        = "actorinformer.cache.size"
	MetricCacheRV          = "actorinformer.cache.resource_version"
	MetricHandlerPanics    = "actorinformer.handler.panics"
	// MetricTraceparentMalformed counts traceparent annotations that could
	// not be parsed (on sampled deltas only: others are not parsed).
	MetricTraceparentMalformed = "actorinformer.traceparent.malformed"
)

// Counters are always-on totals kept with atomics (a few nanoseconds per
// batch); the demo and Stats read them. OTel instruments mirror them when a
// real MeterProvider is configured.
type Counters struct {
	ReflectorEvents atomic.Int64
	Relists         atomic.Int64
	WatchRestarts   atomic.Int64
	WatchErrors     atomic.Int64
	Dropped         atomic.Int64
	QueueIn         atomic.Int64
	QueueOut        atomic.Int64
	QueueMerged     atomic.Int64
	QueueBacklog    atomic.Int64
	IndexerEvents   atomic.Int64
	// TraceparentMalformed counts malformed traceparent annotations seen on
	// sampled deltas.
	TraceparentMalformed atomic.Int64
}

// Metrics records the pipeline's metrics. Methods may be called by multiple
// goroutines simultaneously.
type Metrics struct {
	Counters
	enabled bool
	t       *T

	reflectorEvents, relists, watchRestarts, watchErrors, dropped metric.Int64Counter
	queueIn, queueOut, queueMerged, indexerEvents                 metric.Int64Counter
	listenerEvents, handlerPanics                                 metric.Int64Counter
	traceparentMalformed                                          metric.Int64Counter
	handlerDuration, handlerEventAge, listDuration                metric.Float64Histogram
	queueBacklog, listenerBacklog, cacheSize, cacheRV             metric.Int64ObservableGauge
	watchListWaiting                                              metric.Int64ObservableGauge
	listKinds                                                     [2]metric.MeasurementOption // relist, initial

	// awaiting is what the WatchList waiting gauge observes.
	awaiting atomic.Bool

	mu       sync.Mutex
	backlogs map[*Backlog]struct{}
	cache    CacheSource // nil: no cache gauges
	lastRV   int64       // the cache RV gauge's value: the last RV that parsed
	reg      metric.Registration
}

// CacheSource is what the cache gauges observe: the number of cached
// objects, and the cache's resource version as a number (false when it does
// not parse; the gauge then keeps the last one that did).
type CacheSource struct {
	Len             func() int
	ResourceVersion func() (int64, bool)
}

// SecondsBuckets are the bucket boundaries, in seconds, of the duration
// histograms: 50 µs to one minute.
var SecondsBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Backlog is one listener's backlog gauge: value returns its count of
// notifications sent and not yet done, read at each collection.
type Backlog struct {
	Handler string
	attrs   metric.MeasurementOption
	value   func() int64
}

func isNoopMeter(m metric.Meter) bool {
	switch m.(type) {
	case metricnoop.Meter, *metricnoop.Meter:
		return true
	}
	return reflect.TypeOf(m).String() == "noop.Meter"
}

func newMetrics(m metric.Meter, t *T) *Metrics {
	ms := &Metrics{t: t, backlogs: map[*Backlog]struct{}{}}
	if CompiledOut || isNoopMeter(m) {
		return ms
	}
	ms.enabled = true
	ms.reflectorEvents, _ = m.Int64Counter(MetricReflectorEvents, metric.WithUnit("{event}"), metric.WithDescription("Watch events (bookmarks included) and list items received by the reflector."))
	ms.relists, _ = m.Int64Counter(MetricRelists, metric.WithUnit("{list}"), metric.WithDescription("Lists and relists started by the reflector."))
	ms.watchRestarts, _ = m.Int64Counter(MetricWatchRestarts, metric.WithUnit("{watch}"), metric.WithDescription("Watches (re)started by the reflector."))
	ms.watchErrors, _ = m.Int64Counter(MetricWatchErrors, metric.WithUnit("{error}"), metric.WithDescription("List and watch errors, by reason."))
	ms.dropped, _ = m.Int64Counter(MetricDropped, metric.WithUnit("{object}"), metric.WithDescription("Objects dropped by the reflector (wrong type, malformed, transform error), by reason."))
	ms.queueIn, _ = m.Int64Counter(MetricQueueIn, metric.WithUnit("{delta}"), metric.WithDescription("Deltas queued by the delta queue."))
	ms.queueOut, _ = m.Int64Counter(MetricQueueOut, metric.WithUnit("{delta}"), metric.WithDescription("Deltas handed by the delta queue to the indexer."))
	ms.queueMerged, _ = m.Int64Counter(MetricQueueMerged, metric.WithUnit("{delta}"), metric.WithDescription("Deltas merged into a queued one (collapsed deletes)."))
	ms.indexerEvents, _ = m.Int64Counter(MetricIndexerEvents, metric.WithUnit("{delta}"), metric.WithDescription("Deltas applied to the cache by the indexer."))
	ms.listenerEvents, _ = m.Int64Counter(MetricListenerEvents, metric.WithUnit("{notification}"), metric.WithDescription("Notifications delivered to a handler."))
	ms.handlerPanics, _ = m.Int64Counter(MetricHandlerPanics, metric.WithUnit("{panic}"), metric.WithDescription("Handler panics recovered by a listener."))
	ms.traceparentMalformed, _ = m.Int64Counter(MetricTraceparentMalformed, metric.WithUnit("{annotation}"), metric.WithDescription("Malformed traceparent annotations on sampled deltas, ignored."))
	buckets := metric.WithExplicitBucketBoundaries(SecondsBuckets...)
	ms.handlerDuration, _ = m.Float64Histogram(MetricHandlerDuration, metric.WithUnit("s"), buckets, metric.WithDescription("Handler execution time (every traced call and a sample of the others)."))
	ms.handlerEventAge, _ = m.Float64Histogram(MetricHandlerEventAge, metric.WithUnit("s"), buckets, metric.WithDescription("Time from the reflector receiving a delta to the handler call (every traced call and a sample of the others)."))
	ms.listDuration, _ = m.Float64Histogram(MetricListDuration, metric.WithUnit("s"), buckets, metric.WithDescription("Duration of the reflector's successful lists (all pages) and WatchList streams, by kind."))
	ms.listKinds = [2]metric.MeasurementOption{ms.with(AttrListKind.String("relist")), ms.with(AttrListKind.String("initial"))}
	ms.queueBacklog, _ = m.Int64ObservableGauge(MetricQueueBacklog, metric.WithUnit("{delta}"), metric.WithDescription("Deltas waiting in the delta queue."))
	ms.listenerBacklog, _ = m.Int64ObservableGauge(MetricListenerBacklog, metric.WithUnit("{notification}"), metric.WithDescription("Notifications waiting in a listener's mailbox."))
	ms.cacheSize, _ = m.Int64ObservableGauge(MetricCacheSize, metric.WithUnit("{object}"), metric.WithDescription("Objects in the informer's cache."))
	ms.cacheRV, _ = m.Int64ObservableGauge(MetricCacheRV, metric.WithUnit("1"), metric.WithDescription("The cache's resource version, as client-go's store resource version metric (its last 15 digits)."))
	ms.watchListWaiting, _ = m.Int64ObservableGauge(MetricWatchListWaiting, metric.WithUnit("{stream}"), metric.WithDescription("1 while a WatchList stream waits for its initial-events-end bookmark (the informer cannot sync before it), else 0."))
	ms.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(ms.queueBacklog, ms.QueueBacklog.Load(), t.gaugeSet)
		var waiting int64
		if ms.awaiting.Load() {
			waiting = 1
		}
		o.ObserveInt64(ms.watchListWaiting, waiting, t.gaugeSet)
		ms.mu.Lock()
		defer ms.mu.Unlock()
		for b := range ms.backlogs {
			o.ObserveInt64(ms.listenerBacklog, b.value(), b.attrs)
		}
		if ms.cache.Len != nil {
			o.ObserveInt64(ms.cacheSize, int64(ms.cache.Len()), t.gaugeSet)
		}
		if ms.cache.ResourceVersion != nil {
			if rv, ok := ms.cache.ResourceVersion(); ok {
				ms.lastRV = rv
			}
			o.ObserveInt64(ms.cacheRV, ms.lastRV, t.gaugeSet)
		}
		return nil
	}, ms.queueBacklog, ms.listenerBacklog, ms.cacheSize, ms.cacheRV, ms.watchListWaiting)
	return ms
}

// ObserveCache sets what the cache gauges observe. It costs nothing until a
// collection, and nothing at all without a MeterProvider.
func (m *Metrics) ObserveCache(src CacheSource) {
	m.mu.Lock()
	m.cache = src
	m.mu.Unlock()
}

// Enabled reports whether a real MeterProvider is configured.
func (m *Metrics) Enabled() bool { return !CompiledOut && m.enabled }

// Close unregisters the gauge callbacks.
func (m *Metrics) Close() {
	if m.reg != nil {
		_ = m.reg.Unregister()
	}
}

func (m *Metrics) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append(append([]attribute.KeyValue(nil), m.t.base...), kv...)...)
}

// NewBacklog registers a listener backlog gauge for handler, observing
// value.
func (m *Metrics) NewBacklog(handler string, value func() int64) *Backlog {
	b := &Backlog{Handler: handler, value: value, attrs: metric.WithAttributes(append(slices.Clip(m.t.gauge), AttrHandler.String(handler))...)}
	m.mu.Lock()
	m.backlogs[b] = struct{}{}
	m.mu.Unlock()
	return b
}

// DropBacklog unregisters b.
func (m *Metrics) DropBacklog(b *Backlog) {
	m.mu.Lock()
	delete(m.backlogs, b)
	m.mu.Unlock()
}

func (m *Metrics) ReflectorReceived(n int) {
	m.ReflectorEvents.Add(int64(n))
	if m.Enabled() {
		m.reflectorEvents.Add(context.Background(), int64(n), m.t.baseSet)
	}
}

func (m *Metrics) Relist() {
	m.Relists.Add(1)
	if m.Enabled() {
		m.relists.Add(context.Background(), 1, m.t.baseSet)
	}
}

// WatchRestart counts a watch (or WatchList stream) started; reason says
// why: "initial", "closed", "timeout", "expired" or "error" (see
// docs/tracing.md).
func (m *Metrics) WatchRestart(reason string) {
	m.WatchRestarts.Add(1)
	if m.Enabled() {
		m.watchRestarts.Add(context.Background(), 1, m.with(AttrReason.String(reason)))
	}
}

// ListDuration records how long a successful list (all its pages, and the
// retry of an expired one) or WatchList stream took; initial tells the
// reflector's first from a relist.
func (m *Metrics) ListDuration(d time.Duration, initial bool) {
	if m.Enabled() {
		k := 0
		if initial {
			k = 1
		}
		m.listDuration.Record(context.Background(), d.Seconds(), m.listKinds[k])
	}
}

// AwaitingInitialEvents sets whether a WatchList stream is waiting for its
// initial-events-end bookmark, for the waiting gauge.
func (m *Metrics) AwaitingInitialEvents(on bool) { m.awaiting.Store(on) }

// WatchListWaiting is what the WatchList waiting gauge observes.
func (m *Metrics) WatchListWaiting() bool { return m.awaiting.Load() }

// WatchError counts a list or watch error; reason is a short word such as
// "expired", "forbidden", "network", "watch_error_event".
func (m *Metrics) WatchError(reason string) {
	m.WatchErrors.Add(1)
	if m.Enabled() {
		m.watchErrors.Add(context.Background(), 1, m.with(AttrReason.String(reason)))
	}
}

// Drop counts an object the reflector could not use; reason is e.g.
// "wrong_type", "no_key", "transform".
func (m *Metrics) Drop(reason string) {
	m.Dropped.Add(1)
	if m.Enabled() {
		m.dropped.Add(context.Background(), 1, m.with(AttrReason.String(reason)))
	}
}

func (m *Metrics) Queued(n int) {
	m.QueueIn.Add(int64(n))
	if m.Enabled() {
		m.queueIn.Add(context.Background(), int64(n), m.t.baseSet)
	}
}

func (m *Metrics) Dequeued(n int) {
	m.QueueOut.Add(int64(n))
	if m.Enabled() {
		m.queueOut.Add(context.Background(), int64(n), m.t.baseSet)
	}
}

func (m *Metrics) Merged(n int) {
	m.QueueMerged.Add(int64(n))
	if m.Enabled() {
		m.queueMerged.Add(context.Background(), int64(n), m.t.baseSet)
	}
}

func (m *Metrics) Applied(n int) {
	m.IndexerEvents.Add(int64(n))
	if m.Enabled() {
		m.indexerEvents.Add(context.Background(), int64(n), m.t.baseSet)
	}
}

// HandlerAttrs builds the measurement option for one handler, once.
func (m *Metrics) HandlerAttrs(handler string) metric.MeasurementOption {
	return m.with(AttrHandler.String(handler))
}

func (m *Metrics) Delivered(n int, handler metric.MeasurementOption) {
	if m.Enabled() {
		m.listenerEvents.Add(context.Background(), int64(n), handler)
	}
}

// HandlerCall records one handler call: its duration, and its event age
// (the time from received to start) when received is set. ctx is the
// handler span's context for a traced delta, so that the SDK attaches the
// trace as an exemplar.
func (m *Metrics) HandlerCall(ctx context.Context, received Stamp, start, end time.Time, handler metric.MeasurementOption) {
	if !m.Enabled() {
		return
	}
	if !received.IsZero() {
		m.handlerEventAge.Record(ctx, received.Age(start).Seconds(), handler)
	}
	m.handlerDuration.Record(ctx, end.Sub(start).Seconds(), handler)
}

func (m *Metrics) HandlerPanic(handler metric.MeasurementOption) {
	if m.Enabled() {
		m.handlerPanics.Add(context.Background(), 1, handler)
	}
}

// MalformedTraceparent counts a traceparent annotation that could not be
// parsed.
func (m *Metrics) MalformedTraceparent() {
	m.Counters.TraceparentMalformed.Add(1)
	if m.Enabled() {
		m.traceparentMalformed.Add(context.Background(), 1, m.t.baseSet)
	}
}
