package workqueue

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"k8s.io/client-go/util/workqueue"
)

// collect returns the data points of rm by metric name, for queue name.
func collect(t *testing.T, r *sdkmetric.ManualReader, queue string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(AttrQueueName.String(queue))
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						out[m.Name] = float64(p.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						out[m.Name] = p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						out[m.Name+".count"] = float64(p.Count)
					}
				}
			}
		}
	}
	return out
}

// client-go's own queue, given the provider in its config.
func TestOTelMetricsProviderOnClientGoQueue(t *testing.T) {
	skipWithoutTracing(t) // OpenTelemetry metrics are compiled out too
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods", MetricsProvider: NewOTelMetricsProvider(mp)})
	defer q.ShutDown()

	q.Add("a")
	q.Add("b")
	q.Add("a") // already waiting: not an add for client-go
	got := collect(t, r, "pods")
	if got[MetricAdds] != 2 || got[MetricDepth] != 2 {
		t.Errorf("after 3 adds of 2 items: adds %v, depth %v; want 2, 2 (%v)", got[MetricAdds], got[MetricDepth], got)
	}
	item, _ := q.Get()
	q.Done(item)
	q.AddRateLimited("c")
	held, _ := q.Get() // "b", processing until the end of the test
	defer q.Done(held)
	got = collect(t, r, "pods")
	for name, want := range map[string]float64{
		MetricAdds: 2, MetricDepth: 0, MetricRetries: 1,
		MetricQueueDuration + ".count": 2, MetricWorkDuration + ".count": 1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (%v)", name, got[name], want, got)
		}
	}
	// client-go sets the two gauges every 500 ms while an item is processing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = collect(t, r, "pods")
		if got[MetricLongestRunning] > 0 && got[MetricUnfinishedWork] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gauges not set: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NewRateLimitingQueue gives its meter provider to the queue.
func TestNewRateLimitingQueueRecordsMetrics(t *testing.T) {
	skipWithoutTracing(t)
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	q := NewRateLimitingQueue("ctl", workqueue.DefaultTypedControllerRateLimiter[string](), nil, mp)
	defer q.ShutDown()
	q.Add("a")
	if got := collect(t, r, "ctl"); got[MetricAdds] != 1 || got[MetricDepth] != 1 {
		t.Errorf("metrics %v, want one add and depth 1", got)
	}
}

func TestOTelMetricsProviderNil(t *testing.T) {
	p := NewOTelMetricsProvider(nil)
	p.NewDepthMetric("x").Inc()
	p.NewRetriesMetric("x").Inc()
	p.NewLatencyMetric("x").Observe(1)
	p.NewUnfinishedWorkSecondsMetric("x").Set(1)
}
