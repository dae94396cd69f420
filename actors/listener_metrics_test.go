package actors

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// TestListenerHistogramSampling checks that the per-call histograms get
// every traced call and one in histEvery of the others, the first included.
func TestListenerHistogramSampling(t *testing.T) {
	informertest.NeedsTracing(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tp, Informer: telemetry.InformerInfo{Name: "x"}})
	var calls atomic.Int64
	h := plainHandler{h: cache.ResourceEventHandlerFuncs{AddFunc: func(any) { calls.Add(1) }}}
	var halted atomic.Bool
	l := newListener(1, h, "h", 0, tel, &halted)
	l.histEvery = 3

	_, root := tp.Tracer("t").Start(context.Background(), "root")
	root.End()
	received := telemetry.StampAt(time.Now())
	var items []indexer.Notification
	for i, traced := range []bool{false, false, true, false, false, false, true, false, false} {
		n := indexer.Notification{Type: indexer.NotifyAdd, Received: received,
			New: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(rune('a' + i))}}}
		if traced {
			n.Trace = &telemetry.DeltaTrace{Parent: root.SpanContext(), Since: time.Now()}
		}
		items = append(items, n)
	}
	l.backlog.N.Add(int64(len(items)))
	l.deliver(&indexer.Notifications{Items: items})
	if calls.Load() != 9 {
		t.Fatalf("%d calls", calls.Load())
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	exemplars := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if hist, ok := m.Data.(metricdata.Histogram[float64]); ok && len(hist.DataPoints) == 1 {
				counts[m.Name] = hist.DataPoints[0].Count
				for _, ex := range hist.DataPoints[0].Exemplars {
					if trace.TraceID(ex.TraceID) == root.SpanContext().TraceID() {
						exemplars[m.Name]++
					}
				}
			}
		}
	}
	// Untraced calls 1, 4 and 7 (of 7), and the 2 traced ones.
	for _, name := range []string{telemetry.MetricHandlerDuration, telemetry.MetricHandlerEventAge} {
		if counts[name] != 5 {
			t.Errorf("%s: %d points, want 5 (%v)", name, counts[name], counts)
		}
		if exemplars[name] == 0 {
			t.Errorf("%s: no exemplar of the traced calls' trace", name)
		}
	}
}
