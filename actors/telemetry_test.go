package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// recordingProvider returns an always-sampling SDK provider whose ended spans
// rec keeps.
func recordingProvider(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// spanSet indexes recorded spans by ID and parent.
type spanSet struct {
	all      []sdktrace.ReadOnlySpan
	children map[trace.SpanID][]sdktrace.ReadOnlySpan
}

func newSpanSet(spans []sdktrace.ReadOnlySpan) *spanSet {
	s := &spanSet{all: spans, children: map[trace.SpanID][]sdktrace.ReadOnlySpan{}}
	for _, sp := range spans {
		if sp.Parent().IsValid() {
			s.children[sp.Parent().SpanID()] = append(s.children[sp.Parent().SpanID()], sp)
		}
	}
	return s
}

func spanAttr(sp sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range sp.Attributes() {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// named returns the spans called name, in the order they ended.
func (s *spanSet) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.all {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// roots returns the root spans of the object called object with delta type
// deltaType.
func (s *spanSet) roots(object, deltaType string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.named(telemetry.SpanReflector) {
		if spanAttr(sp, telemetry.AttrObjectName) == object && spanAttr(sp, telemetry.AttrDeltaType) == deltaType {
			out = append(out, sp)
		}
	}
	return out
}

// childrenNamed returns parent's children called name.
func (s *spanSet) childrenNamed(parent sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, c := range s.children[parent.SpanContext().SpanID()] {
		if c.Name() == name {
			out = append(out, c)
		}
	}
	return out
}

// chain follows root → fifo.queue → indexer.apply → listener.deliver →
// handler and returns the handler spans, failing unless every hop has
// exactly one span (listener.deliver: handlers of them).
func (s *spanSet) chain(t *testing.T, root sdktrace.ReadOnlySpan, handlers int) []sdktrace.ReadOnlySpan {
	t.Helper()
	one := func(parent sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
		t.Helper()
		c := s.childrenNamed(parent, name)
		if len(c) != 1 {
			t.Fatalf("%d %q spans under %q of %s, want 1", len(c), name, parent.Name(), spanAttr(root, telemetry.AttrObjectName))
		}
		if c[0].SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Fatalf("%q is not in the root's trace", name)
		}
		return c[0]
	}
	apply := one(one(root, telemetry.SpanQueue), telemetry.SpanIndexer)
	deliveries := s.childrenNamed(apply, telemetry.SpanListener)
	if len(deliveries) != handlers {
		t.Fatalf("%d %q spans, want %d", len(deliveries), telemetry.SpanListener, handlers)
	}
	var out []sdktrace.ReadOnlySpan
	for _, d := range deliveries {
		out = append(out, one(d, telemetry.SpanHandler))
	}
	return out
}

func linksTo(sp sdktrace.ReadOnlySpan, target sdktrace.ReadOnlySpan) bool {
	for _, l := range sp.Links() {
		if l.SpanContext.SpanID() == target.SpanContext().SpanID() && l.SpanContext.TraceID() == target.SpanContext().TraceID() {
			return true
		}
	}
	return false
}

// TestListSpanLinksItsItemsAndTombstones: every list makes one reflector.list
// span; the root span of each item it returns, and of each tombstone the
// relist produces for an object gone meanwhile, links to it.
func TestListSpanLinksItsItemsAndTombstones(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	for _, n := range []string{"a", "b", "c"} {
		src.Add(pod("ns", n, 1))
	}
	rec, tp := recordingProvider(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false), actors.WithTracerProvider(tp))
	tombstones := make(chan cache.DeletedFinalStateUnknown, 1)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if ts, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			tombstones <- ts
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)

	// c disappears without a watch event; the watch is cut and its history
	// dropped, so the reflector relists and the queue makes a tombstone.
	src.DeleteDropWatch(pod("ns", "c", 1))
	src.ResetWatch()
	select {
	case ts := <-tombstones:
		if ts.Key != "ns/c" {
			t.Fatalf("tombstone for %q, want ns/c", ts.Key)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no tombstone delivered after the relist")
	}
	stop()

	s := newSpanSet(rec.Ended())
	lists := s.named(telemetry.SpanList)
	if len(lists) != 2 {
		t.Fatalf("%d %q spans, want 2 (list and relist)", len(lists), telemetry.SpanList)
	}
	for i, l := range lists {
		if l.Parent().IsValid() {
			t.Errorf("list span %d has a parent", i)
		}
		if got, want := spanAttr(l, telemetry.AttrListItems), fmt.Sprint(3-i); got != want {
			t.Errorf("list span %d: %s = %q, want %s", i, telemetry.AttrListItems, got, want)
		}
	}
	for i, names := range [][]string{{"a", "b", "c"}, {"a", "b"}} {
		for _, n := range names {
			roots := s.roots(n, "Replaced")
			if len(roots) != 2 && n != "c" || len(roots) != 1 && n == "c" {
				t.Fatalf("%s: %d Replaced root spans", n, len(roots))
			}
			var linked int
			for _, r := range roots {
				if linksTo(r, lists[i]) {
					linked++
				}
				if len(r.Links()) != 1 {
					t.Errorf("%s: root has %d links, want 1", n, len(r.Links()))
				}
			}
			if linked != 1 {
				t.Errorf("%s: %d root spans link to list %d, want 1", n, linked, i)
			}
		}
	}
	tomb := s.roots("c", "Deleted")
	if len(tomb) != 1 {
		t.Fatalf("%d Deleted root spans for c, want 1 (the tombstone)", len(tomb))
	}
	if !linksTo(tomb[0], lists[1]) || len(tomb[0].Links()) != 1 {
		t.Errorf("tombstone root links %v, want the relist span only", tomb[0].Links())
	}
	if got := spanAttr(tomb[0], telemetry.AttrObjectUID); got != "uid-ns-c" {
		t.Errorf("tombstone uid %q", got)
	}
	s.chain(t, tomb[0], 1)
}

// TestHandlerPanicIsRecordedOnItsSpan: the panicking handler's span has
// status Error and an exception event with the stack; the other handler's
// span for the same delta is untouched.
// Real time: the spans of the real call path (the simulator records none).
func TestHandlerPanicIsRecordedOnItsSpan(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	rec, tp := recordingProvider(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false), actors.WithTracerProvider(tp))
	var calls atomic.Int64
	if _, err := inf.AddEventHandler(panickyHandler{calls: &calls}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(countingHandler{calls: &calls}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Add(pod("ns", "bad", 1))
	eventually(t, 10*time.Second, "both handlers called", func() string {
		if n := calls.Load(); n != 2 {
			return fmt.Sprint(n, " calls")
		}
		return ""
	})
	stop()

	s := newSpanSet(rec.Ended())
	roots := s.roots("bad", "Added")
	if len(roots) != 1 {
		t.Fatalf("%d root spans", len(roots))
	}
	var failed, fine int
	for _, h := range s.chain(t, roots[0], 2) {
		switch spanAttr(h, telemetry.AttrHandler) {
		case handlerTypeName("panickyHandler"):
			failed++
			if h.Status().Code != codes.Error || !strings.Contains(h.Status().Description, "boom") {
				t.Errorf("panicking handler span status %+v", h.Status())
			}
			var exc []sdktrace.Event
			for _, e := range h.Events() {
				if e.Name == "exception" {
					exc = append(exc, e)
				}
			}
			if len(exc) != 1 {
				t.Fatalf("%d exception events, want 1: %v", len(exc), h.Events())
			}
			attrs := map[attribute.Key]string{}
			for _, kv := range exc[0].Attributes {
				attrs[kv.Key] = kv.Value.Emit()
			}
			if !strings.Contains(attrs["exception.message"], "boom") ||
				!strings.Contains(attrs["exception.stacktrace"], "goroutine") {
				t.Errorf("exception event attributes %v", attrs)
			}
		case handlerTypeName("countingHandler"):
			fine++
			if h.Status().Code != codes.Unset || len(h.Events()) != 0 {
				t.Errorf("calm handler span: status %+v events %v", h.Status(), h.Events())
			}
		default:
			t.Errorf("handler span of %q", spanAttr(h, telemetry.AttrHandler))
		}
	}
	if failed != 1 || fine != 1 {
		t.Fatalf("handler spans: %d failed, %d fine", failed, fine)
	}
}

// TestDroppedDeleteIsRecordedInItsTrace: a watch Deleted event for an object
// the informer does not hold is dropped by the queue; its trace ends with a
// fifo.queue span carrying the delta.merged event and the reason.
// (fifo/trace_test.go covers the other reason, a delete collapsed into a
// queued one, which cannot be provoked deterministically from here.)
func TestDroppedDeleteIsRecordedInItsTrace(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	rec, tp := recordingProvider(t)
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false), actors.WithTracerProvider(tp))
	after := make(chan struct{})
	var deletes atomic.Int64
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { close(after) },
		DeleteFunc: func(any) { deletes.Add(1) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	src.Delete(pod("ns", "ghost", 1))
	src.Add(pod("ns", "after", 1)) // queued behind the delete: when it arrives, the delete is handled
	select {
	case <-after:
	case <-time.After(10 * time.Second):
		t.Fatal("add not delivered")
	}
	stop()
	if n := deletes.Load(); n != 0 {
		t.Fatalf("%d deletes delivered", n)
	}
	if n := inf.Stats().QueueMerged; n != 1 {
		t.Fatalf("QueueMerged = %d, want 1", n)
	}

	s := newSpanSet(rec.Ended())
	roots := s.roots("ghost", "Deleted")
	if len(roots) != 1 {
		t.Fatalf("%d root spans for the delete", len(roots))
	}
	q := s.childrenNamed(roots[0], telemetry.SpanQueue)
	if len(q) != 1 || len(s.children[roots[0].SpanContext().SpanID()]) != 1 {
		t.Fatalf("root children %v, want one %q", s.children[roots[0].SpanContext().SpanID()], telemetry.SpanQueue)
	}
	ev := q[0].Events()
	if len(ev) != 1 || ev[0].Name != fifo.EventMerged {
		t.Fatalf("queue span events %v, want %q", ev, fifo.EventMerged)
	}
	if len(ev[0].Attributes) != 1 || ev[0].Attributes[0] != telemetry.AttrReason.String(fifo.ReasonAlreadyDeleted) {
		t.Fatalf("merge event attributes %v", ev[0].Attributes)
	}
	if n := len(s.children[q[0].SpanContext().SpanID()]); n != 0 {
		t.Fatalf("dropped delta has %d spans after the queue", n)
	}
}

// TestResyncDeltasAreTraced: a resync's Sync deltas get root spans (made by
// the queue) and reach only the handlers whose resync is due.
// Real time: the spans of the real pipeline (the simulator records none),
// after a resync check of 1 s; which handlers get a resync, on the fake
// clock: internal/sim's testdata/resync_*.txt.
func TestResyncDeltasAreTraced(t *testing.T) {
	informertest.NeedsTracing(t)
	src, lw := newSource(t)
	src.Add(pod("ns", "a", 1))
	rec, tp := recordingProvider(t)
	// A default resync period: without one an informer does no resyncs.
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, time.Second, nil, actors.WithWatchList(false), actors.WithTracerProvider(tp))
	resynced := make(chan struct{}, 100)
	if _, err := inf.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, obj any) {
		if informertest.RV(old) == informertest.RV(obj) {
			resynced <- struct{}{}
		}
	}}, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{}, 0); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	select {
	case <-resynced:
	case <-time.After(10 * time.Second):
		t.Fatal("no resync")
	}
	stop()

	s := newSpanSet(rec.Ended())
	roots := s.roots("a", "Sync")
	if len(roots) == 0 {
		t.Fatal("no Sync root span")
	}
	r := roots[0]
	if len(r.Links()) != 0 || r.Parent().IsValid() {
		t.Errorf("Sync root: parent %v links %v", r.Parent(), r.Links())
	}
	if got := spanAttr(r, telemetry.AttrResourceVersion); got != "1" {
		t.Errorf("Sync root resource version %q", got)
	}
	// One handler span: the handler without resyncs is not delivered to.
	h := s.chain(t, r, 1)
	if got := spanAttr(h[0], telemetry.AttrNotification); got != "update" {
		t.Errorf("notification type %q", got)
	}
}

// countingHandler and panickyHandler are named types so that their handler
// names (in spans and metrics) are known.
type countingHandler struct{ calls *atomic.Int64 }

func (h countingHandler) OnAdd(any, bool)   { h.calls.Add(1) }
func (h countingHandler) OnUpdate(_, _ any) { h.calls.Add(1) }
func (h countingHandler) OnDelete(any)      { h.calls.Add(1) }

// panickyHandler panics on the object named "bad".
type panickyHandler struct{ calls *atomic.Int64 }

func (h panickyHandler) OnAdd(obj any, _ bool) { h.call(obj) }
func (h panickyHandler) OnUpdate(_, obj any)   { h.call(obj) }
func (h panickyHandler) OnDelete(obj any)      { h.call(obj) }

func (h panickyHandler) call(obj any) {
	h.calls.Add(1)
	if p, ok := obj.(*corev1.Pod); ok && p.Name == "bad" {
		panic("boom")
	}
}

func handlerTypeName(typ string) string {
	return "github.com/actorinformer/actorinformer/actors_test." + typ
}

// scriptedLW is a ListWatch whose lists are answered by list (call number
// from 0) and whose watches are fake watchers handed to the test.
func scriptedLW(list func(call int) (runtime.Object, error)) (*cache.ListWatch, chan *watch.RaceFreeFakeWatcher) {
	watches := make(chan *watch.RaceFreeFakeWatcher, 10)
	var calls atomic.Int64
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return list(int(calls.Add(1) - 1))
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewRaceFreeFake()
			watches <- w
			return w, nil
		},
	}, watches
}

func nextWatch(t *testing.T, watches chan *watch.RaceFreeFakeWatcher) *watch.RaceFreeFakeWatcher {
	t.Helper()
	select {
	case w := <-watches:
		return w
	case <-time.After(30 * time.Second):
		t.Fatal("no watch started")
		return nil
	}
}

func withRV(p *corev1.Pod, rv string) *corev1.Pod {
	p.ResourceVersion = rv
	return p
}

// TestMetrics runs a scripted informer with an SDK MeterProvider and checks
// every metric of telemetry/metrics.go: its instrument kind and
// its value after the script.
// Real time: the metrics of the real pipeline (the simulator records none).
func TestMetrics(t *testing.T) {
	informertest.NeedsTracing(t)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no list rights"))
	lw, watches := scriptedLW(func(call int) (runtime.Object, error) {
		if call == 0 {
			return nil, forbidden
		}
		return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"},
			Items: []corev1.Pod{*withRV(pod("ns", "p1", 1), "5"), *withRV(pod("ns", "p2", 1), "6")}}, nil
	})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil, actors.WithWatchList(false),
		actors.WithMeterProvider(mp), actors.WithName("pods-metrics"), actors.WithResource(gvr),
		actors.WithHandlerHistogramEvery(1))
	var calls atomic.Int64
	if _, err := inf.AddEventHandler(countingHandler{calls: &calls}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(panickyHandler{calls: &calls}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := running(t, inf)
	waitSynced(t, ctx, inf.HasSynced)
	w := nextWatch(t, watches)
	w.Add(withRV(pod("ns", "p3", 1), "11"))
	w.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "12"}}) // wrong type
	w.Modify(withRV(pod("ns", "p1", 2), "13"))
	w.Delete(withRV(pod("ns", "p2", 1), "14"))
	w.Delete(withRV(pod("ns", "ghost", 1), "15")) // not cached: dropped by the queue
	w.Add(withRV(pod("ns", "bad", 1), "16"))      // panics in panickyHandler
	const perHandler = 6                          // 2 listed, p3, p1, p2, bad
	eventually(t, 10*time.Second, "deliveries", func() string {
		for _, h := range inf.Stats().Handlers {
			if h.Delivered != perHandler {
				return fmt.Sprintf("%s delivered %d", h.Name, h.Delivered)
			}
		}
		return ""
	})
	w.Stop() // the watch ends: the reflector watches again
	nextWatch(t, watches)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	stop()
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	base := []attribute.KeyValue{
		telemetry.AttrInformer.String("pods-metrics"), telemetry.AttrAPIGroup.String(""),
		telemetry.AttrAPIVersion.String("v1"), telemetry.AttrAPIResource.String("pods"),
	}
	counting, panicky := handlerTypeName("countingHandler"), handlerTypeName("panickyHandler")
	counters := []struct {
		name  string
		attrs []attribute.KeyValue // besides base
		want  int64
	}{
		{telemetry.MetricReflectorEvents, nil, 8}, // 2 listed + 6 watch events
		{telemetry.MetricRelists, nil, 2},         // the forbidden list and the next
		{telemetry.MetricWatchRestarts, []attribute.KeyValue{telemetry.AttrReason.String("initial")}, 1},
		{telemetry.MetricWatchRestarts, []attribute.KeyValue{telemetry.AttrReason.String("closed")}, 1},
		{telemetry.MetricWatchErrors, []attribute.KeyValue{telemetry.AttrReason.String("forbidden")}, 1},
		{telemetry.MetricDropped, []attribute.KeyValue{telemetry.AttrReason.String("wrong_type")}, 1},
		// 2 listed + the list's bookmark + p3, p1, p2, bad.
		{telemetry.MetricQueueIn, nil, 7},
		{telemetry.MetricQueueOut, nil, 7},
		{telemetry.MetricQueueMerged, nil, 1},
		{telemetry.MetricIndexerEvents, nil, 7},
		{telemetry.MetricListenerEvents, []attribute.KeyValue{telemetry.AttrHandler.String(counting)}, perHandler},
		{telemetry.MetricListenerEvents, []attribute.KeyValue{telemetry.AttrHandler.String(panicky)}, perHandler},
		{telemetry.MetricHandlerPanics, []attribute.KeyValue{telemetry.AttrHandler.String(panicky)}, 1},
	}
	for _, c := range counters {
		sum, ok := got[c.name].Data.(metricdata.Sum[int64])
		if !ok || !sum.IsMonotonic || sum.Temporality != metricdata.CumulativeTemporality {
			t.Errorf("%s: %T (monotonic %v), want a cumulative monotonic int64 sum", c.name, got[c.name].Data, sum.IsMonotonic)
			continue
		}
		want := attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), c.attrs...)...)
		var found bool
		for _, dp := range sum.DataPoints {
			if dp.Attributes.Equals(&want) {
				found = true
				if dp.Value != c.want {
					t.Errorf("%s %v = %d, want %d", c.name, c.attrs, dp.Value, c.want)
				}
			} else if c.attrs == nil || !dp.Attributes.HasValue(c.attrs[0].Key) {
				t.Errorf("%s: unexpected data point %v = %d", c.name, dp.Attributes.ToSlice(), dp.Value)
			}
		}
		if !found {
			t.Errorf("%s: no data point with %v in %+v", c.name, c.attrs, sum.DataPoints)
		}
	}
	if sum, _ := got[telemetry.MetricHandlerPanics].Data.(metricdata.Sum[int64]); len(sum.DataPoints) != 1 {
		t.Errorf("%s: %d data points, want 1 (only the panicking handler)", telemetry.MetricHandlerPanics, len(sum.DataPoints))
	}

	gauges := []struct {
		name     string
		handlers []string
	}{
		{telemetry.MetricQueueBacklog, nil},
		{telemetry.MetricListenerBacklog, []string{counting, panicky}},
		{telemetry.MetricWatchListWaiting, nil},
	}
	for _, g := range gauges {
		gauge, ok := got[g.name].Data.(metricdata.Gauge[int64])
		if !ok {
			t.Errorf("%s: %T, want an int64 gauge", g.name, got[g.name].Data)
			continue
		}
		want := max(1, len(g.handlers))
		if len(gauge.DataPoints) != want {
			t.Errorf("%s: %d data points, want %d", g.name, len(gauge.DataPoints), want)
		}
		for _, dp := range gauge.DataPoints {
			if dp.Value != 0 {
				t.Errorf("%s %v = %d, want 0 once everything is delivered", g.name, dp.Attributes.ToSlice(), dp.Value)
			}
			if v, _ := dp.Attributes.Value(telemetry.AttrInformer); v.AsString() != "pods-metrics" {
				t.Errorf("%s: informer attribute %q", g.name, v.Emit())
			}
		}
	}

	hist, ok := got[telemetry.MetricHandlerDuration].Data.(metricdata.Histogram[float64])
	if !ok || got[telemetry.MetricHandlerDuration].Unit != "s" {
		t.Fatalf("%s: %T unit %q, want a float64 histogram in s", telemetry.MetricHandlerDuration, got[telemetry.MetricHandlerDuration].Data, got[telemetry.MetricHandlerDuration].Unit)
	}
	if len(hist.DataPoints) != 2 {
		t.Fatalf("%s: %d data points, want one per handler", telemetry.MetricHandlerDuration, len(hist.DataPoints))
	}
	for _, dp := range hist.DataPoints {
		v, _ := dp.Attributes.Value(telemetry.AttrHandler)
		if dp.Count != perHandler || dp.Sum <= 0 || dp.Sum > 10 {
			t.Errorf("%s %s: count %d sum %gs, want %d calls taking some time", telemetry.MetricHandlerDuration, v.Emit(), dp.Count, dp.Sum, perHandler)
		}
	}

	// Every metric documented in telemetry (and docs/tracing.md), with its
	// unit.
	for name, unit := range map[string]string{
		telemetry.MetricReflectorEvents: "{event}", telemetry.MetricRelists: "{list}", telemetry.MetricWatchRestarts: "{watch}",
		telemetry.MetricWatchErrors: "{error}", telemetry.MetricDropped: "{object}", telemetry.MetricQueueIn: "{delta}",
		telemetry.MetricQueueOut: "{delta}", telemetry.MetricQueueMerged: "{delta}", telemetry.MetricQueueBacklog: "{delta}",
		telemetry.MetricIndexerEvents: "{delta}", telemetry.MetricListenerEvents: "{notification}",
		telemetry.MetricListenerBacklog: "{notification}", telemetry.MetricHandlerDuration: "s", telemetry.MetricHandlerPanics: "{panic}",
		telemetry.MetricHandlerEventAge: "s", telemetry.MetricListDuration: "s", telemetry.MetricCacheSize: "{object}",
		telemetry.MetricCacheRV: "1", telemetry.MetricWatchListWaiting: "{stream}",
	} {
		if m, ok := got[name]; !ok {
			t.Errorf("metric %s not recorded", name)
		} else if m.Unit != unit {
			t.Errorf("metric %s: unit %q, want %q", name, m.Unit, unit)
		}
	}
	if len(got) != 19 {
		t.Errorf("%d metrics recorded, want the 19 documented ones", len(got))
	}
}
