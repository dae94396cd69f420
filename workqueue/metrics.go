package workqueue

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"k8s.io/client-go/util/workqueue"

	"github.com/actorinformer/actorinformer/telemetry"
)

// Metric names of the queues [NewOTelMetricsProvider] measures, one per
// metric of client-go's workqueue (its Prometheus name in parentheses).
const (
	MetricDepth          = "actorinformer.workqueue.depth"                     // workqueue_depth
	MetricAdds           = "actorinformer.workqueue.adds"                      // workqueue_adds_total
	MetricQueueDuration  = "actorinformer.workqueue.queue.duration"            // workqueue_queue_duration_seconds
	MetricWorkDuration   = "actorinformer.workqueue.work.duration"             // workqueue_work_duration_seconds
	MetricUnfinishedWork = "actorinformer.workqueue.unfinished_work"           // workqueue_unfinished_work_seconds
	MetricLongestRunning = "actorinformer.workqueue.longest_running_processor" // workqueue_longest_running_processor_seconds
	MetricRetries        = "actorinformer.workqueue.retries"                   // workqueue_retries_total
	// MetricOldestAge has no client-go counterpart: how long the oldest
	// item waiting for a worker has waited ([Waiting], [OTelMetricsProvider.ObserveOldest]).
	MetricOldestAge = "actorinformer.workqueue.oldest.age"
)

// AttrQueueName is the queue's name (client-go's "name" label) on every
// metric data point.
const AttrQueueName = attribute.Key("actorinformer.workqueue.name")

// OTelMetricsProvider is client-go's workqueue.MetricsProvider on
// OpenTelemetry. Give it to any client-go queue:
//
//	workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{
//		Name: "pods", MetricsProvider: NewOTelMetricsProvider(mp)})
//
// client-go measures only named queues. Its methods may be called by
// multiple goroutines simultaneously.
type OTelMetricsProvider struct {
	depth                  metric.Int64UpDownCounter
	adds, retries          metric.Int64Counter
	latency, work          metric.Float64Histogram
	unfinished, longestRun metric.Float64Gauge
	meter                  metric.Meter
	oldest                 metric.Float64ObservableGauge
}

var _ workqueue.MetricsProvider = (*OTelMetricsProvider)(nil)

// NewOTelMetricsProvider records client-go's workqueue metrics through mp
// (instrumentation scope github.com/actorinformer/actorinformer). A nil mp,
// or a build with the actorinformer_notrace tag, records nothing.
func NewOTelMetricsProvider(mp metric.MeterProvider) *OTelMetricsProvider {
	if mp == nil || telemetry.CompiledOut {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(telemetry.ScopeName)
	p := &OTelMetricsProvider{meter: m}
	// The SDK returns a working instrument with an error only for invalid
	// names or units, which these are not; a failing meter's instrument is a
	// no-op.
	p.depth, _ = m.Int64UpDownCounter(MetricDepth, metric.WithUnit("{item}"),
		metric.WithDescription("Items waiting in the queue"))
	p.adds, _ = m.Int64Counter(MetricAdds, metric.WithUnit("{item}"),
		metric.WithDescription("Adds the queue took in (adds of an item already waiting are not counted)"))
	p.latency, _ = m.Float64Histogram(MetricQueueDuration, metric.WithUnit("s"),
		metric.WithDescription("How long an item waited in the queue before a worker got it"))
	p.work, _ = m.Float64Histogram(MetricWorkDuration, metric.WithUnit("s"),
		metric.WithDescription("How long processing an item took, from Get to Done"))
	p.unfinished, _ = m.Float64Gauge(MetricUnfinishedWork, metric.WithUnit("s"),
		metric.WithDescription("Seconds of work in progress not yet done (sum over the items being processed)"))
	p.longestRun, _ = m.Float64Gauge(MetricLongestRunning, metric.WithUnit("s"),
		metric.WithDescription("How long the longest-running processing has run"))
	p.retries, _ = m.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Rate-limited adds (retries)"))
	p.oldest, _ = m.Float64ObservableGauge(MetricOldestAge, metric.WithUnit("s"),
		metric.WithDescription("How long the item that has waited longest for a worker has waited (0 when none waits)"))
	return p
}

// ObserveOldest observes the oldest waiting item's age of the queue named
// name, whose store is w ([Waiting]), at each collection, until the
// returned registration is unregistered (at the queue's shutdown).
func (p *OTelMetricsProvider) ObserveOldest(name string, w interface{ Oldest() (time.Duration, int) }) (metric.Registration, error) {
	opts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(AttrQueueName.String(name)))}
	return p.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		age, _ := w.Oldest()
		o.ObserveFloat64(p.oldest, age.Seconds(), opts...)
		return nil
	}, p.oldest)
}

// addOpts and recordOpts are built once per queue: passing the option as a
// variadic argument of an interface method would allocate on every call.
func addOpts(name string) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(AttrQueueName.String(name)))}
}

func recordOpts(name string) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(AttrQueueName.String(name)))}
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return upDown{p.depth, addOpts(name)}
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return counter{p.adds, addOpts(name)}
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return histogram{p.latency, recordOpts(name)}
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return histogram{p.work, recordOpts(name)}
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return gauge{p.unfinished, recordOpts(name)}
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return gauge{p.longestRun, recordOpts(name)}
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (p *OTelMetricsProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return counter{p.retries, addOpts(name)}
}

type upDown struct {
	c     metric.Int64UpDownCounter
	attrs []metric.AddOption
}

func (u upDown) Inc() { u.c.Add(context.Background(), 1, u.attrs...) }
func (u upDown) Dec() { u.c.Add(context.Background(), -1, u.attrs...) }

type counter struct {
	c     metric.Int64Counter
	attrs []metric.AddOption
}

func (c counter) Inc() { c.c.Add(context.Background(), 1, c.attrs...) }

type histogram struct {
	h     metric.Float64Histogram
	attrs []metric.RecordOption
}

func (h histogram) Observe(v float64) { h.h.Record(context.Background(), v, h.attrs...) }

type gauge struct {
	g     metric.Float64Gauge
	attrs []metric.RecordOption
}

func (g gauge) Set(v float64) { g.g.Record(context.Background(), v, g.attrs...) }
