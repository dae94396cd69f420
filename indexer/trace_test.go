package indexer

import (
	"k8s.io/utils/clock"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/telemetry"
)

// tickingClock advances by one millisecond at every reading.
type tickingClock struct {
	clock.RealClock // timers: unused here
	t               time.Time
}

func (c *tickingClock) Now() time.Time { c.t = c.t.Add(time.Millisecond); return c.t }

func newTracing(t *testing.T) (*telemetry.T, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return telemetry.New(telemetry.Config{TracerProvider: tp}), rec
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestTracing(t *testing.T) {
	informertest.NeedsTracing(t)
	tel, rec := newTracing(t)
	clk := &tickingClock{t: time.Now()}
	c := NewCore(NewStore(nil, nil).Writer(), Config{Telemetry: tel, Clock: clk})
	c.subscribe(&Subscribe{ID: 1})

	p := pod("ns", "a", "1")
	root := tel.StartDelta("Added", telemetry.ObjectMeta{Namespace: "ns", Name: "a"}, time.Now(), trace.SpanContext{})
	if root == nil {
		t.Fatal("root span not sampled")
	}
	root.QueueDepth = 7
	traced := delta(fifo.Added, p)
	traced.Trace = root
	n := c.applyAll([]fifo.Delta{traced, delta(fifo.Added, pod("ns", "b", "1"))})

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want root, queue and indexer", len(spans))
	}
	rootSpan, queue, apply := spans[0], spans[1], spans[2]
	if rootSpan.Name() != telemetry.SpanReflector || queue.Name() != telemetry.SpanQueue || apply.Name() != telemetry.SpanIndexer {
		t.Fatalf("span names %q %q %q", rootSpan.Name(), queue.Name(), apply.Name())
	}
	if queue.Parent().SpanID() != root.Parent.SpanID() || queue.SpanContext().TraceID() != root.Parent.TraceID() {
		t.Error("fifo.queue is not a child of the root span")
	}
	if apply.Parent().SpanID() != queue.SpanContext().SpanID() {
		t.Error("indexer.apply is not a child of fifo.queue")
	}
	if !queue.StartTime().Equal(root.Since) || queue.EndTime().After(apply.StartTime()) || apply.EndTime().Before(apply.StartTime()) {
		t.Errorf("span times: queue %v..%v, apply %v..%v, root handed on at %v",
			queue.StartTime(), queue.EndTime(), apply.StartTime(), apply.EndTime(), root.Since)
	}
	if v := attr(queue, telemetry.AttrQueueDepth); v.AsInt64() != 7 {
		t.Errorf("queue depth attribute = %v", v.Emit())
	}
	if v := attr(queue, telemetry.AttrBatchSize); v.AsInt64() != 2 {
		t.Errorf("batch size attribute = %v", v.Emit())
	}
	if v := attr(apply, telemetry.AttrDeltaType); v.AsString() != "Added" {
		t.Errorf("delta type attribute = %v", v.Emit())
	}
	if v := attr(apply, telemetry.AttrNotification); v.AsString() != "add" {
		t.Errorf("notification attribute = %v", v.Emit())
	}

	dt := n.Items[0].Trace
	if dt == nil || dt.Parent.SpanID() != apply.SpanContext().SpanID() {
		t.Fatalf("notification trace %+v does not point at indexer.apply", dt)
	}
	if dt.Since.Before(apply.EndTime()) {
		t.Errorf("notification handed on at %v, before the apply ended at %v", dt.Since, apply.EndTime())
	}
	if n.Items[1].Trace != nil {
		t.Error("an untraced delta got a trace")
	}

	// Untraced deltas: no span at all.
	c.applyAll([]fifo.Delta{delta(fifo.Updated, pod("ns", "a", "2")), delta(fifo.Deleted, pod("ns", "b", "1"))})
	if got := len(rec.Ended()); got != 3 {
		t.Fatalf("untraced deltas made %d spans", got-3)
	}

	// Traced without subscribers: spans are still recorded.
	c.Step(&Unsubscribe{ID: 1})
	root2 := tel.StartDelta("Deleted", telemetry.ObjectMeta{}, time.Now(), trace.SpanContext{})
	d := delta(fifo.Deleted, pod("ns", "a", "2"))
	d.Trace = root2
	if n := c.applyAll([]fifo.Delta{d}); n != nil {
		t.Fatal("notifications without subscribers")
	}
	spans = rec.Ended()
	if len(spans) != 6 || spans[5].Name() != telemetry.SpanIndexer || attr(spans[5], telemetry.AttrNotification).AsString() != "delete" {
		t.Fatalf("got %d spans after a traced delete without subscribers", len(spans))
	}
}

func TestTracingOff(t *testing.T) {
	// A delta may carry a trace while this informer's telemetry traces
	// nothing: the core must not touch it.
	tel, _ := newTracing(t)
	root := tel.StartDelta("Added", telemetry.ObjectMeta{}, time.Now(), trace.SpanContext{})
	c := NewCore(NewStore(nil, nil).Writer(), Config{Telemetry: telemetry.Nop()})
	c.subscribe(&Subscribe{ID: 1})
	d := delta(fifo.Added, pod("ns", "a", "1"))
	d.Trace = root
	if n := c.applyAll([]fifo.Delta{d}); n.Items[0].Trace != nil {
		t.Fatal("trace stamped with tracing off")
	}
}

// TestActorAcknowledgesABatchThatPanicked makes applying a batch panic
// inside the indexer actor (the clock of traced deltas panics once, before
// the first delta) and checks that the restarted actor applies the batch
// and the queue gets its acknowledgement, so the pipeline does not stall,
// and that it applies the next batch.
func TestActorAcknowledgesABatchThatPanicked(t *testing.T) {
	informertest.NeedsTracing(t)
	tel, _ := newTracing(t)
	clk := &panickyClock{}
	store := NewStore(nil, nil)
	h := newTracedHarness(t, store, tel, clk)

	traced := func(p *corev1.Pod) fifo.Delta {
		d := delta(fifo.Added, p)
		d.Trace = tel.StartDelta("Added", telemetry.ObjectMeta{Namespace: p.Namespace, Name: p.Name}, time.Now(), trace.SpanContext{})
		return d
	}
	h.apply(traced(pod("ns", "a", "1")), traced(pod("ns", "b", "1"))) // panics, applied and acknowledged on restart
	if clk.calls.Load() < 2 {
		t.Fatalf("clock called %d times, want the 1 that panicked and those of the restart", clk.calls.Load())
	}
	if store.Len() != 2 {
		t.Fatalf("the restart left %v in the cache, want the batch's a and b", store.ListKeys())
	}
	h.apply(traced(pod("ns", "c", "1")))
	if _, ok, _ := store.GetByKey("ns/c"); !ok {
		t.Fatal("the batch after the panic was not applied")
	}
}

// panickyClock panics on its first reading.
type panickyClock struct {
	clock.RealClock
	calls atomic.Int32
}

func (c *panickyClock) Now() time.Time {
	if c.calls.Add(1) == 1 {
		panic("clock bug")
	}
	return time.Now()
}
