package listener

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// funcs is an EventHandler of functions; nil ones are skipped.
type funcs struct {
	add    func(obj any)
	update func(old, obj any)
}

func (f funcs) OnAdd(_ context.Context, obj any, _ bool) {
	if f.add != nil {
		f.add(obj)
	}
}
func (f funcs) OnUpdate(_ context.Context, old, obj any) {
	if f.update != nil {
		f.update(old, obj)
	}
}
func (f funcs) OnDelete(context.Context, any) {}

// TestHandlerCall: the handler call path makes a batch's calls in order, a
// Sync notification only when the batch syncs to the handler, none once
// the handler is removed (still counted), lets go of an owned batch's
// objects, counts every CounterFlush notifications, and tells Synced when
// the initial batch is done and when the initial-list notifications are.
func TestHandlerCall(t *testing.T) {
	obj := func(i int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("p", i), ResourceVersion: "1"}}
	}
	var calls []string
	var sent indexer.Sent
	ctr := &Counters{Sent: &sent}
	var removed atomic.Bool
	var synced int
	var seen []int64
	h := NewHandler(HandlerConfig{
		Handler: funcs{
			add: func(o any) {
				calls = append(calls, "add "+o.(*corev1.Pod).Name)
				seen = append(seen, ctr.Backlog())
			},
			update: func(_, o any) { calls = append(calls, "update "+o.(*corev1.Pod).Name) },
		},
		Counters: ctr, Removed: &removed, Synced: func() { synced++ },
	})

	sent.Initial.Add(1)
	sent.Notifications.Add(3)
	h.Call(&Calls{InitialBatch: true, Items: []indexer.Notification{
		{Type: indexer.NotifyAdd, New: obj(0), InitialList: true},
		{Type: indexer.NotifyUpdate, Old: obj(0), New: obj(0), Sync: true},
		{Type: indexer.NotifyUpdate, Old: obj(0), New: obj(1)},
	}})
	if want := "[add p0 update p1]"; fmt.Sprint(calls) != want {
		t.Fatalf("calls %v, want %s", calls, want)
	}
	if ctr.Backlog() != 0 || ctr.Pending() != 0 || !ctr.InitialDone.Load() || synced != 2 {
		t.Fatalf("backlog %d, pending %d, initial done %v, synced told %d times; want 0, 0, true, 2",
			ctr.Backlog(), ctr.Pending(), ctr.InitialDone.Load(), synced)
	}

	seen = nil
	items := make([]indexer.Notification, 2*CounterFlush+3)
	for i := range items {
		items[i] = indexer.Notification{Type: indexer.NotifyAdd, New: obj(i)}
	}
	sent.Notifications.Add(int64(len(items)))
	h.Call(&Calls{Items: items, Owned: true})
	if len(seen) != len(items) || seen[CounterFlush] != int64(len(items)-CounterFlush) || ctr.Backlog() != 0 {
		t.Fatalf("%d calls; backlog after the first flush %d, at the end %d", len(seen), seen[CounterFlush], ctr.Backlog())
	}
	for i := range items {
		if items[i].New != nil {
			t.Fatalf("owned item %d not cleared", i)
		}
	}

	removed.Store(true)
	seen = nil
	sent.Notifications.Add(1)
	h.Call(&Calls{Items: []indexer.Notification{{Type: indexer.NotifyAdd, New: obj(0)}}})
	if len(seen) != 0 || ctr.Backlog() != 0 {
		t.Fatalf("removed handler: %d calls, backlog %d; want none, 0", len(seen), ctr.Backlog())
	}
}

// TestHandlerPanic: a panicking handler is reported and counted, and the
// call path goes on with the next notification.
func TestHandlerPanic(t *testing.T) {
	var calls int
	ctr := &Counters{Sent: &indexer.Sent{}}
	logger := logr.Discard() // the panic's report
	h := NewHandler(HandlerConfig{Handler: funcs{add: func(o any) {
		calls++
		if o.(*corev1.Pod).Name == "bad" {
			panic("boom")
		}
	}}, Counters: ctr, Logger: &logger})
	h.Call(&Calls{Items: []indexer.Notification{
		{Type: indexer.NotifyAdd, New: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad"}}},
		{Type: indexer.NotifyAdd, New: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "good"}}},
	}})
	if calls != 2 || ctr.Panics.Load() != 1 || ctr.Delivered.Load() != 2 {
		t.Fatalf("%d calls, %d panics, %d delivered; want 2, 1, 2", calls, ctr.Panics.Load(), ctr.Delivered.Load())
	}
}

// TestHandlerHistogramSampling checks that the per-call histograms get
// every traced call and one in HistogramEvery of the others, the first
// included.
func TestHandlerHistogramSampling(t *testing.T) {
	informertest.NeedsTracing(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel := telemetry.New(telemetry.Config{MeterProvider: mp, TracerProvider: tp, Informer: telemetry.InformerInfo{Name: "x"}})
	var calls atomic.Int64
	h := NewHandler(HandlerConfig{Handler: funcs{add: func(any) { calls.Add(1) }}, Name: "h", Telemetry: tel, HistogramEvery: 3})

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
	h.Call(&Calls{Items: items})
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
