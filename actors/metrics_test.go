package actors_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// histogramPoint returns the data point of a float64 histogram whose
// attribute k is v.
func histogramPoint(t *testing.T, m metricdata.Metrics, k attribute.Key, v string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok || m.Unit != "s" {
		t.Fatalf("%s: %T unit %q, want a float64 histogram in s", m.Name, m.Data, m.Unit)
	}
	for _, dp := range h.DataPoints {
		if got, _ := dp.Attributes.Value(k); got.AsString() == v {
			if inf, _ := dp.Attributes.Value(telemetry.AttrInformer); inf.AsString() != "lat" {
				t.Errorf("%s: informer attribute %q", m.Name, inf.Emit())
			}
			return dp
		}
	}
	t.Fatalf("%s: no data point with %s=%s in %+v", m.Name, k, v, h.DataPoints)
	return metricdata.HistogramDataPoint[float64]{}
}

func gaugeValue(t *testing.T, m metricdata.Metrics) int64 {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok || len(g.DataPoints) != 1 {
		t.Fatalf("%s: %T %+v, want one int64 gauge point", m.Name, m.Data, m.Data)
	}
	return g.DataPoints[0].Value
}

// TestLatencyMetrics checks the event age and handler duration histograms
// (values and exemplars), the list durations, the cache gauges and the
// watch restart reasons on a running informer with SDK providers. Real
// time: the ages and durations are measured on the real clock.
func TestLatencyMetrics(t *testing.T) {
	informertest.NeedsTracing(t)
	const delay = 300 * time.Millisecond
	lw, watches := scriptedLW(func(call int) (runtime.Object, error) {
		if call == 0 {
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"},
				Items: []corev1.Pod{*withRV(pod("ns", "p1", 1), "5"), *withRV(pod("ns", "p2", 1), "6")}}, nil
		}
		// The relist: p2 is gone.
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "20"},
			Items: []corev1.Pod{*withRV(pod("ns", "p1", 1), "5"), *withRV(pod("ns", "block", 1), "11"), *withRV(pod("ns", "slow", 1), "12")}}, nil
	})
	rec, tp := recordingProvider(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)) // exemplars: the SDK's default trace-based filter
	defer func() { _ = mp.Shutdown(context.Background()) }()
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false), actors.WithName("lat"),
		actors.WithMeterProvider(mp), actors.WithTracerProvider(tp), actors.WithHandlerHistogramEvery(1),
		actors.WithDeltaSampler(actors.SampleKeys("ns/slow"))) // only ns/slow is traced

	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	var blocked atomic.Bool
	h := actors.ContextEventHandlerFuncs{AddFunc: func(_ context.Context, obj any, _ bool) {
		if obj.(*corev1.Pod).Name == "block" && blocked.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
	}}
	if _, err := inf.AddContextEventHandler(actors.NamedContextHandler("gate", h)); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	w := nextWatch(t, watches)

	// ns/slow waits in the listener's mailbox behind ns/block, which the
	// handler holds for delay: its event age is at least delay.
	w.Add(withRV(pod("ns", "block", 1), "11"))
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("handler not called for ns/block")
	}
	w.Add(withRV(pod("ns", "slow", 1), "12"))
	eventually(t, 30*time.Second, "ns/slow queued for the handler", func() string {
		if b := inf.Stats().Handlers[0].Backlog; b < 2 { // block (in the call) and slow
			return fmt.Sprintf("backlog %d", b)
		}
		return ""
	})
	time.Sleep(delay)
	unblock()
	eventually(t, 30*time.Second, "deliveries", func() string {
		if d := inf.Stats().Handlers[0].Delivered; d != 4 {
			return fmt.Sprintf("delivered %d", d)
		}
		return ""
	})

	var slowTrace sdktrace.ReadOnlySpan
	for _, sp := range newSpanSet(rec.Ended()).named(telemetry.SpanHandler) {
		slowTrace = sp
	}
	if slowTrace == nil {
		t.Fatal("no handler span for ns/slow")
	}
	traceID, spanID := slowTrace.SpanContext().TraceID(), slowTrace.SpanContext().SpanID()

	got := informertest.CollectMetrics(t, reader)
	age := histogramPoint(t, got[telemetry.MetricHandlerEventAge], telemetry.AttrHandler, "gate")
	if age.Count != 4 {
		t.Errorf("event age: %d points, want one per call (4)", age.Count)
	}
	if mx, ok := age.Max.Value(); !ok || mx < delay.Seconds() || mx > 30 {
		t.Errorf("event age max %v (%v), want at least the %v ns/slow waited", mx, ok, delay)
	}
	dur := histogramPoint(t, got[telemetry.MetricHandlerDuration], telemetry.AttrHandler, "gate")
	if mx, ok := dur.Max.Value(); dur.Count != 4 || !ok || mx < delay.Seconds() {
		t.Errorf("handler duration: count %d max %v, want 4 calls, one of at least %v", dur.Count, mx, delay)
	}
	// Exemplars: only the traced delta's calls have one, pointing at its
	// handler span.
	for name, dp := range map[string]metricdata.HistogramDataPoint[float64]{"event age": age, "duration": dur} {
		if len(dp.Exemplars) != 1 {
			t.Errorf("%s: %d exemplars, want 1 (ns/slow's): %+v", name, len(dp.Exemplars), dp.Exemplars)
			continue
		}
		ex := dp.Exemplars[0]
		if string(ex.TraceID) != string(traceID[:]) || string(ex.SpanID) != string(spanID[:]) {
			t.Errorf("%s exemplar: trace %x span %x, want ns/slow's handler span %s %s", name, ex.TraceID, ex.SpanID, traceID, spanID)
		}
		if name == "event age" && ex.Value < delay.Seconds() {
			t.Errorf("event age exemplar %gs, want at least %v", ex.Value, delay)
		}
	}

	// Force a relist: the watch fails with 410.
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	nextWatch(t, watches)
	store := inf.GetStore()
	eventually(t, 30*time.Second, "relist applied", func() string {
		if rv := store.(interface{ LastStoreSyncResourceVersion() string }).LastStoreSyncResourceVersion(); rv != "20" || len(store.ListKeys()) != 3 {
			return fmt.Sprintf("RV %q, %d keys", rv, len(store.ListKeys()))
		}
		return ""
	})
	got = informertest.CollectMetrics(t, reader)
	stop()
	if n := gaugeValue(t, got[telemetry.MetricCacheSize]); n != int64(len(store.ListKeys())) {
		t.Errorf("cache size %d, store holds %d", n, len(store.ListKeys()))
	}
	if rv := gaugeValue(t, got[telemetry.MetricCacheRV]); strconv.FormatInt(rv, 10) != "20" {
		t.Errorf("cache resource version %d, want 20", rv)
	}
	initial := histogramPoint(t, got[telemetry.MetricListDuration], telemetry.AttrListKind, "initial")
	relist := histogramPoint(t, got[telemetry.MetricListDuration], telemetry.AttrListKind, "relist")
	if initial.Count != 1 || relist.Count != 1 || initial.Sum <= 0 || relist.Sum <= 0 || initial.Sum > 30 || relist.Sum > 30 {
		t.Errorf("list durations: initial %d lists %gs, relist %d lists %gs; want one each", initial.Count, initial.Sum, relist.Count, relist.Sum)
	}
	restarts := map[string]int64{}
	sum, _ := got[telemetry.MetricWatchRestarts].Data.(metricdata.Sum[int64])
	for _, dp := range sum.DataPoints {
		v, _ := dp.Attributes.Value(telemetry.AttrReason)
		restarts[v.AsString()] = dp.Value
	}
	if len(restarts) != 2 || restarts["initial"] != 1 || restarts["expired"] != 1 {
		t.Errorf("watch restarts by reason %v, want initial 1, expired 1", restarts)
	}
}
