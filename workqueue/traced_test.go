package workqueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/util/workqueue"

	"github.com/actorinformer/actorinformer/telemetry"
)

func skipWithoutTracing(t *testing.T) {
	t.Helper()
	if telemetry.CompiledOut {
		t.Skip("tracing is compiled out (actorinformer_notrace)")
	}
}

func newBareQueue(t testing.TB) workqueue.TypedRateLimitingInterface[string] {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Second))
	t.Cleanup(q.ShutDown)
	return q
}

// newTraced returns a traced queue recording every span in rec.
func newTraced(t *testing.T) (*Traced[string], *tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return New(newBareQueue(t), tp), rec, tp.Tracer("test")
}

// handlerSpans starts and ends n spans and returns contexts carrying them.
func handlerSpans(tracer trace.Tracer, n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		var span trace.Span
		ctxs[i], span = tracer.Start(context.Background(), fmt.Sprintf("handler-%d", i))
		span.End()
	}
	return ctxs
}

func processSpans(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == SpanProcess {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func intAttr(t *testing.T, s sdktrace.ReadOnlySpan, k attribute.Key) int64 {
	t.Helper()
	v, ok := attrOf(s, k)
	if !ok {
		t.Fatalf("span %s has no attribute %s: %v", s.Name(), k, s.Attributes())
	}
	return v.AsInt64()
}

func linked(s sdktrace.ReadOnlySpan) []trace.SpanContext {
	var out []trace.SpanContext
	for _, l := range s.Links() {
		out = append(out, l.SpanContext)
	}
	return out
}

func spanContexts(ctxs []context.Context) []trace.SpanContext {
	out := make([]trace.SpanContext, len(ctxs))
	for i, c := range ctxs {
		out[i] = trace.SpanContextFromContext(c)
	}
	return out
}

func equalSCs(a, b []trace.SpanContext) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func TestProcessSpanLinksEveryAddAndEndsAtDone(t *testing.T) {
	skipWithoutTracing(t)
	q, rec, tracer := newTraced(t)
	ctxs := handlerSpans(tracer, 3)
	for _, c := range ctxs {
		q.AddCtx(c, "default/web")
	}
	q.Add("default/web") // no span: counted, not linked
	ctx, item, shutdown := q.GetCtx()
	if item != "default/web" || shutdown {
		t.Fatalf("GetCtx = %q, %v", item, shutdown)
	}
	span := trace.SpanFromContext(ctx)
	if !span.SpanContext().IsValid() || !span.IsRecording() {
		t.Fatal("GetCtx's context carries no recording span")
	}
	if got := processSpans(rec); len(got) != 0 {
		t.Fatalf("%d process spans ended before Done", len(got))
	}
	q.Done(item)
	got := processSpans(rec)
	if len(got) != 1 {
		t.Fatalf("%d process spans after Done, want 1", len(got))
	}
	s := got[0]
	if !s.SpanContext().Equal(span.SpanContext()) {
		t.Error("the ended span is not the one GetCtx handed out")
	}
	if s.Parent().IsValid() {
		t.Errorf("process span has a parent %v, want a root", s.Parent())
	}
	if s.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kind %v", s.SpanKind())
	}
	if want := spanContexts(ctxs); !equalSCs(linked(s), want) {
		t.Errorf("links %v, want %v", linked(s), want)
	}
	if n := intAttr(t, s, AttrAdds); n != 4 {
		t.Errorf("adds = %d, want 4", n)
	}
	if n := intAttr(t, s, AttrLinksDropped); n != 0 {
		t.Errorf("links.dropped = %d, want 0", n)
	}
	if n := intAttr(t, s, AttrRequeues); n != 0 {
		t.Errorf("requeues = %d, want 0", n)
	}
	if v, _ := attrOf(s, AttrItem); v.AsString() != "default/web" {
		t.Errorf("item = %q", v.AsString())
	}
	assertNoState(t, q)
}

func TestProcessSpanLinksCappedWithOverflowCount(t *testing.T) {
	skipWithoutTracing(t)
	q, rec, tracer := newTraced(t)
	ctxs := handlerSpans(tracer, MaxLinks+8)
	for _, c := range ctxs {
		q.AddCtx(c, "k")
	}
	q.AddCtx(ctxs[0], "k") // the same span twice is linked once
	_, item, _ := q.GetCtx()
	q.Done(item)
	s := processSpans(rec)[0]
	if want := spanContexts(ctxs[:MaxLinks]); !equalSCs(linked(s), want) {
		t.Errorf("%d links, want the first %d adds' spans", len(s.Links()), MaxLinks)
	}
	if n := intAttr(t, s, AttrLinksDropped); n != 8 {
		t.Errorf("links.dropped = %d, want 8", n)
	}
	if n := intAttr(t, s, AttrAdds); n != MaxLinks+9 {
		t.Errorf("adds = %d, want %d", n, MaxLinks+9)
	}
}

func TestAddWhileProcessingLinksToNextProcessing(t *testing.T) {
	skipWithoutTracing(t)
	q, rec, tracer := newTraced(t)
	ctxs := handlerSpans(tracer, 3)
	q.AddCtx(ctxs[0], "k")
	_, item, _ := q.GetCtx()
	q.AddCtx(ctxs[1], "k") // while processing: client-go requeues it after Done
	q.AddCtx(ctxs[2], "k")
	q.Done(item)
	if q.Len() != 1 {
		t.Fatalf("Len = %d after Done, want the item requeued", q.Len())
	}
	_, item, _ = q.GetCtx()
	q.Done(item)
	got := processSpans(rec)
	if len(got) != 2 {
		t.Fatalf("%d process spans, want 2", len(got))
	}
	if want := spanContexts(ctxs[:1]); !equalSCs(linked(got[0]), want) {
		t.Errorf("first processing links %v, want %v", linked(got[0]), want)
	}
	if want := spanContexts(ctxs[1:]); !equalSCs(linked(got[1]), want) {
		t.Errorf("second processing links %v, want %v", linked(got[1]), want)
	}
	assertNoState(t, q)
}

func TestAddAfterLinksToProcessingAfterTheDelay(t *testing.T) {
	skipWithoutTracing(t)
	q, rec, tracer := newTraced(t)
	ctxs := handlerSpans(tracer, 3)
	q.AddAfterCtx(ctxs[0], "k", time.Hour) // not due for the next processing
	q.AddCtx(ctxs[1], "k")
	_, item, _ := q.GetCtx()
	q.Done(item)
	q.AddAfterCtx(ctxs[2], "k", 5*time.Millisecond)
	_, item, _ = q.GetCtx() // blocks until the delay ends
	q.Done(item)
	got := processSpans(rec)
	if len(got) != 2 {
		t.Fatalf("%d process spans, want 2", len(got))
	}
	if want := spanContexts(ctxs[1:2]); !equalSCs(linked(got[0]), want) {
		t.Errorf("first processing links %v, want %v", linked(got[0]), want)
	}
	if want := spanContexts(ctxs[2:]); !equalSCs(linked(got[1]), want) {
		t.Errorf("second processing links %v, want %v", linked(got[1]), want)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.delayed["k"]) != 1 {
		t.Errorf("delayed adds %v, want the one-hour add kept", q.delayed)
	}
}

func TestProcessSpanRecordsRequeuesAndWait(t *testing.T) {
	skipWithoutTracing(t)
	q, rec, tracer := newTraced(t)
	ctxs := handlerSpans(tracer, 1)
	before := time.Now()
	q.AddCtx(ctxs[0], "k")
	_, item, _ := q.GetCtx()
	q.AddRateLimitedCtx(ctxs[0], item) // a failed reconcile retries
	q.Done(item)
	_, item, _ = q.GetCtx() // after the limiter's 1 ms
	q.Done(item)
	elapsed := time.Since(before)
	got := processSpans(rec)
	if len(got) != 2 {
		t.Fatalf("%d process spans, want 2", len(got))
	}
	for i, want := range []int64{0, 1} {
		if n := intAttr(t, got[i], AttrRequeues); n != want {
			t.Errorf("processing %d: requeues = %d, want %d", i, n, want)
		}
		v, ok := attrOf(got[i], AttrWait)
		if w := time.Duration(v.AsFloat64() * float64(time.Second)); !ok || w < 0 || w > elapsed {
			t.Errorf("processing %d: wait = %v (set: %v), want within [0, %v]", i, w, ok, elapsed)
		}
	}
	if !equalSCs(linked(got[1]), spanContexts(ctxs)) {
		t.Errorf("the retry's processing links %v", linked(got[1]))
	}
}

func TestPlainGetRecordsTheSpan(t *testing.T) {
	skipWithoutTracing(t)
	q, rec, tracer := newTraced(t)
	q.AddCtx(handlerSpans(tracer, 1)[0], "k")
	item, _ := q.Get()
	q.Done(item)
	if got := processSpans(rec); len(got) != 1 || len(got[0].Links()) != 1 {
		t.Fatalf("process spans %v", got)
	}
}

func TestItemAttributeOfAStringer(t *testing.T) {
	skipWithoutTracing(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	inner := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[stringer]())
	defer inner.ShutDown()
	q := New(inner, tp)
	q.Add(stringer{"a", "b"})
	_, item, _ := q.GetCtx()
	q.Done(item)
	if v, _ := attrOf(processSpans(rec)[0], AttrItem); v.AsString() != "a/b" {
		t.Errorf("item = %q, want a/b", v.AsString())
	}
}

type stringer struct{ ns, name string }

func (s stringer) String() string { return s.ns + "/" + s.name }

func TestSampledOutProcessingKeepsNoState(t *testing.T) {
	skipWithoutTracing(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(rec))
	q := New(newBareQueue(t), tp)
	q.Add("k")
	ctx, item, _ := q.GetCtx()
	if trace.SpanFromContext(ctx).IsRecording() {
		t.Error("a sampled-out span records")
	}
	q.Done(item)
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded", n)
	}
	assertNoState(t, q)
}

func assertNoState(t *testing.T, q *Traced[string]) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending)+len(q.delayed)+len(q.active) != 0 {
		t.Errorf("state left: pending %v, delayed %v, active %v", q.pending, q.delayed, q.active)
	}
}

// Without a tracer provider, or with a no-op one, or with tracing compiled
// out, the queue only delegates.
func TestUntracedOnlyDelegates(t *testing.T) {
	for name, tp := range map[string]trace.TracerProvider{
		"none": nil,
		"noop": tracenoop.NewTracerProvider(),
	} {
		t.Run(name, func(t *testing.T) {
			q := New(newBareQueue(t), tp)
			if q.tracer != nil {
				t.Fatal("tracer set")
			}
			q.AddCtx(context.Background(), "k")
			ctx, item, _ := q.GetCtx()
			if ctx != context.Background() || item != "k" {
				t.Errorf("GetCtx = %v, %q", ctx, item)
			}
			q.Done(item)
			if q.pending != nil || q.active != nil {
				t.Error("state kept")
			}
		})
	}
	if telemetry.CompiledOut {
		rec := tracetest.NewSpanRecorder()
		q := New(newBareQueue(t), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
		q.Add("k")
		_, item, _ := q.GetCtx()
		q.Done(item)
		if len(rec.Ended()) != 0 {
			t.Error("spans recorded with tracing compiled out")
		}
	}
}

// The untraced cycle allocates no more than client-go's bare queue.
func TestUntracedAllocatesAsTheBareQueue(t *testing.T) {
	bare := newBareQueue(t)
	traced := New(newBareQueue(t), nil)
	cycle := func(q workqueue.TypedRateLimitingInterface[string]) func() {
		return func() {
			q.Add("k")
			item, _ := q.Get()
			q.Done(item)
		}
	}
	b := testing.AllocsPerRun(1000, cycle(bare))
	tr := testing.AllocsPerRun(1000, cycle(traced))
	if tr > b {
		t.Errorf("traced queue allocates %v per cycle, bare %v", tr, b)
	}
}

// spy records the calls that must reach the wrapped queue.
type spy struct {
	workqueue.TypedRateLimitingInterface[string]
	mu    sync.Mutex
	calls []string
}

func (s *spy) called(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
}

func (s *spy) ShutDown() {
	s.called("ShutDown")
	s.TypedRateLimitingInterface.ShutDown()
}

func (s *spy) ShutDownWithDrain() {
	s.called("ShutDownWithDrain")
	s.TypedRateLimitingInterface.ShutDownWithDrain()
}

func (s *spy) Forget(item string) {
	s.called("Forget")
	s.TypedRateLimitingInterface.Forget(item)
}

func TestShutDownDelegates(t *testing.T) {
	s := &spy{TypedRateLimitingInterface: newBareQueue(t)}
	q := New[string](s, nil)
	q.ShutDown()
	if !q.ShuttingDown() {
		t.Error("not shutting down")
	}
	if _, _, shutdown := q.GetCtx(); !shutdown {
		t.Error("GetCtx after ShutDown: shutdown = false")
	}
	q.Forget("k")
	if fmt.Sprint(s.calls) != "[ShutDown Forget]" {
		t.Errorf("calls %v", s.calls)
	}
}

func TestShutDownWithDrainWaitsForDone(t *testing.T) {
	q, rec, tracer := newTraced(t)
	s := &spy{TypedRateLimitingInterface: q.q}
	q.q = s
	q.AddCtx(handlerSpans(tracer, 1)[0], "k")
	_, item, _ := q.GetCtx()
	drained := make(chan struct{})
	go func() { q.ShutDownWithDrain(); close(drained) }()
	for !q.ShuttingDown() {
		time.Sleep(time.Millisecond) // until the drain has begun
	}
	select {
	case <-drained:
		t.Fatal("ShutDownWithDrain returned with an item still processing")
	default:
	}
	q.Done(item)
	select {
	case <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("ShutDownWithDrain did not return after Done")
	}
	if fmt.Sprint(s.calls) != "[ShutDownWithDrain]" {
		t.Errorf("calls %v", s.calls)
	}
	if !telemetry.CompiledOut && len(processSpans(rec)) != 1 {
		t.Error("the processing's span did not end")
	}
}

// Many producers and workers at once: run with -race.
func TestConcurrentAddsAndWorkers(t *testing.T) {
	q, rec, tracer := newTraced(t)
	ctxs := handlerSpans(tracer, 4)
	var wg sync.WaitGroup
	const perProducer = 200
	for p := range 4 {
		wg.Go(func() {
			for i := range perProducer {
				q.AddCtx(ctxs[p], fmt.Sprint("k", i%10))
			}
		})
	}
	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() {
			for {
				ctx, item, shutdown := q.GetCtx()
				if shutdown {
					return
				}
				_, span := tracer.Start(ctx, "reconcile")
				span.End()
				q.Done(item)
			}
		})
	}
	wg.Wait()
	q.ShutDownWithDrain()
	workers.Wait()
	if telemetry.CompiledOut {
		return
	}
	var adds int64
	for _, s := range processSpans(rec) {
		adds += intAttr(t, s, AttrAdds)
	}
	q.mu.Lock()
	for _, a := range q.pending { // adds merged into a processing that never came
		adds += int64(a.n)
	}
	q.mu.Unlock()
	if adds != 4*perProducer {
		t.Errorf("adds counted %d, want %d", adds, 4*perProducer)
	}
}
