package workqueue

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/telemetry"
)

// SpanProcess is the name of the span of one processing of an item.
const SpanProcess = "workqueue.process"

// MaxLinks bounds the links of one workqueue.process span; the adds beyond
// it are counted in AttrLinksDropped.
const MaxLinks = 32

// Attributes of the workqueue.process span (docs/tracing.md).
const (
	// AttrItem is the item, when it is a string or a fmt.Stringer (such as
	// cache.ObjectName).
	AttrItem = attribute.Key("actorinformer.workqueue.item")
	// AttrAdds counts the adds merged into this processing.
	AttrAdds = attribute.Key("actorinformer.workqueue.adds")
	// AttrWait is how long the item waited, in seconds, from the first of
	// those adds (or the end of its delay, for AddAfter) to GetCtx.
	AttrWait = attribute.Key("actorinformer.workqueue.wait")
	// AttrRequeues is the queue's NumRequeues for the item at GetCtx.
	AttrRequeues = attribute.Key("actorinformer.workqueue.requeues")
	// AttrLinksDropped counts the adds' spans not linked, beyond MaxLinks.
	AttrLinksDropped = attribute.Key("actorinformer.workqueue.links.dropped")
)

// Traced is a client-go rate-limiting workqueue that carries traces from the
// adds of an item to its processing. Its methods may be called by multiple
// goroutines simultaneously.
//
// The plain methods behave as the Ctx ones with a context that has no span:
// Add, AddAfter and AddRateLimited still count towards the next processing's
// adds and wait, and Get still records the processing's span (ended by Done),
// only its context is not handed out.
type Traced[T comparable] struct {
	q      workqueue.TypedRateLimitingInterface[T]
	tracer trace.Tracer // nil: tracing off, every method only delegates

	mu      sync.Mutex
	pending map[T]*adds        // adds since the item was last handed out
	delayed map[T][]delayedAdd // AddAfter adds whose delay has not ended
	active  map[T]trace.Span   // processing spans, ended by Done

	stopMetrics func() // nil, or unregisters the oldest age's callback
}

var _ workqueue.TypedRateLimitingInterface[string] = (*Traced[string])(nil)

// adds are what the next processing of an item links to.
type adds struct {
	links   []trace.Link
	dropped int
	n       int
	first   time.Time // when the earliest add was ready
}

func (a *adds) add(sc trace.SpanContext, ready time.Time) {
	a.n++
	if a.first.IsZero() || ready.Before(a.first) {
		a.first = ready
	}
	if !sc.IsValid() {
		return
	}
	for _, l := range a.links {
		if l.SpanContext.Equal(sc) {
			return
		}
	}
	if len(a.links) < MaxLinks {
		a.links = append(a.links, trace.Link{SpanContext: sc})
	} else {
		a.dropped++
	}
}

type delayedAdd struct {
	sc    trace.SpanContext
	ready time.Time
}

// New wraps q, tracing through tp. q's metrics are those q was built with
// (see [NewOTelMetricsProvider], or [NewRateLimitingQueue], which builds
// the queue). With a nil or no-op tp, the Traced queue only delegates to q.
func New[T comparable](q workqueue.TypedRateLimitingInterface[T], tp trace.TracerProvider) *Traced[T] {
	t := &Traced[T]{q: q}
	if !telemetry.CompiledOut && tp != nil && !isNoopTracerProvider(tp) {
		t.tracer = tp.Tracer(telemetry.ScopeName)
		t.pending = map[T]*adds{}
		t.delayed = map[T][]delayedAdd{}
		t.active = map[T]trace.Span{}
	}
	return t
}

// NewRateLimitingQueue builds client-go's rate-limiting queue named name,
// its metrics (client-go's: depth, adds, queue and work duration,
// unfinished work, longest running processor, retries; and the oldest
// waiting item's age, kept by a [Waiting] store) recorded through mp by
// [NewOTelMetricsProvider], and wraps it, tracing through tp. A nil mp
// leaves the queue to client-go's global workqueue metrics provider (as
// client-go's constructors do), with no age; a nil tp traces nothing.
// ShutDown and ShutDownWithDrain stop observing the age.
func NewRateLimitingQueue[T comparable](name string, rl workqueue.TypedRateLimiter[T], tp trace.TracerProvider, mp metric.MeterProvider) *Traced[T] {
	return newRateLimitingQueue(name, rl, tp, mp, nil)
}

// newRateLimitingQueue is NewRateLimitingQueue on clk (nil: the real clock).
func newRateLimitingQueue[T comparable](name string, rl workqueue.TypedRateLimiter[T], tp trace.TracerProvider, mp metric.MeterProvider, clk clock.WithTicker) *Traced[T] {
	if mp == nil || telemetry.CompiledOut {
		cfg := workqueue.TypedRateLimitingQueueConfig[T]{Name: name, Clock: clk}
		if mp != nil {
			cfg.MetricsProvider = NewOTelMetricsProvider(mp)
		}
		return New(workqueue.NewTypedRateLimitingQueueWithConfig(rl, cfg), tp)
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := NewOTelMetricsProvider(mp)
	w := NewWaiting[T](nil, clk)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[T]{
		Name: name, MetricsProvider: p, Clock: clk,
		DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[T]{
			Name: name, MetricsProvider: p, Clock: clk,
			Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[T]{
				Name: name, MetricsProvider: p, Clock: clk, Queue: w}),
		}),
	})
	t := New(q, tp)
	// An error leaves a no-op registration: the instrument is the meter's.
	if reg, err := p.ObserveOldest(name, w); err == nil {
		t.stopMetrics = sync.OnceFunc(func() { _ = reg.Unregister() })
	}
	return t
}

func isNoopTracerProvider(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return true
	}
	// The deprecated trace.NewNoopTracerProvider has an unexported type.
	return reflect.TypeOf(tp).String() == "trace.noopTracerProvider"
}

func (t *Traced[T]) tracing() bool { return !telemetry.CompiledOut && t.tracer != nil }

// Add is AddCtx without a span.
func (t *Traced[T]) Add(item T) { t.AddCtx(context.Background(), item) }

// AddAfter is AddAfterCtx without a span.
func (t *Traced[T]) AddAfter(item T, d time.Duration) { t.AddAfterCtx(context.Background(), item, d) }

// AddRateLimited is AddRateLimitedCtx without a span.
func (t *Traced[T]) AddRateLimited(item T) { t.AddRateLimitedCtx(context.Background(), item) }

// AddCtx adds item to the queue and records the span in ctx, if any, for
// the next processing of item to link to.
func (t *Traced[T]) AddCtx(ctx context.Context, item T) {
	if t.tracing() {
		now := time.Now()
		t.record(ctx, item, now, now)
	}
	t.q.Add(item)
}

// AddAfterCtx adds item once d has passed and records the span in ctx for
// the first processing of item that starts after that.
func (t *Traced[T]) AddAfterCtx(ctx context.Context, item T, d time.Duration) {
	if t.tracing() {
		now := time.Now()
		t.record(ctx, item, now, now.Add(max(d, 0)))
	}
	t.q.AddAfter(item, d)
}

// AddRateLimitedCtx adds item when the rate limiter says so and records the
// span in ctx for the next processing of item. The queue does not say when
// the limiter lets the item in: if item is added again meanwhile, the link
// goes to that earlier processing.
func (t *Traced[T]) AddRateLimitedCtx(ctx context.Context, item T) {
	if t.tracing() {
		now := time.Now()
		t.record(ctx, item, now, now)
	}
	t.q.AddRateLimited(item)
}

// record is called before the item reaches the queue, so that a worker that
// gets it finds the add recorded.
func (t *Traced[T]) record(ctx context.Context, item T, now, ready time.Time) {
	sc := trace.SpanContextFromContext(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	if ready.After(now) {
		t.delayed[item] = append(t.delayed[item], delayedAdd{sc: sc, ready: ready})
		return
	}
	t.pendingLocked(item).add(sc, ready)
}

func (t *Traced[T]) pendingLocked(item T) *adds {
	a := t.pending[item]
	if a == nil {
		a = &adds{}
		t.pending[item] = a
	}
	return a
}

// Get is GetCtx without the context: the processing's span is still
// recorded and ended by Done.
func (t *Traced[T]) Get() (item T, shutdown bool) {
	_, item, shutdown = t.GetCtx()
	return item, shutdown
}

// GetCtx blocks until an item can be processed, as Get, and returns with it a
// context carrying the workqueue.process span of this processing; Done(item)
// ends it. The span links to the spans recorded by the adds of item since it
// was last handed out. Without tracing, ctx is context.Background().
func (t *Traced[T]) GetCtx() (ctx context.Context, item T, shutdown bool) {
	item, shutdown = t.q.Get()
	if !t.tracing() || shutdown {
		return context.Background(), item, shutdown
	}
	now := time.Now()
	a := t.take(item, now)
	attrs := make([]attribute.KeyValue, 0, 5)
	if kv, ok := itemAttr(item); ok {
		attrs = append(attrs, kv)
	}
	attrs = append(attrs, AttrRequeues.Int(t.q.NumRequeues(item)))
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(now)}
	if a != nil {
		attrs = append(attrs, AttrAdds.Int(a.n), AttrWait.Float64(now.Sub(a.first).Seconds()), AttrLinksDropped.Int(a.dropped))
		opts = append(opts, trace.WithLinks(a.links...))
	} else {
		attrs = append(attrs, AttrAdds.Int(0))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, span := t.tracer.Start(context.Background(), SpanProcess, opts...)
	if span.IsRecording() {
		t.mu.Lock()
		old := t.active[item]
		t.active[item] = span
		t.mu.Unlock()
		if old != nil { // a Get without Done: end the stale span
			old.End(trace.WithTimestamp(now))
		}
	}
	return ctx, item, false
}

// take removes and returns what the processing of item starting at now
// links to: the adds since it was last handed out and the delayed adds whose
// delay has ended. It returns nil when there are none.
func (t *Traced[T]) take(item T, now time.Time) *adds {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.pending[item]
	delete(t.pending, item)
	if ds, ok := t.delayed[item]; ok {
		keep := ds[:0]
		for _, d := range ds {
			if d.ready.After(now) {
				keep = append(keep, d)
				continue
			}
			if a == nil {
				a = &adds{}
			}
			a.add(d.sc, d.ready)
		}
		if len(keep) == 0 {
			delete(t.delayed, item)
		} else {
			t.delayed[item] = slices.Clip(keep)
		}
	}
	return a
}

func itemAttr[T comparable](item T) (attribute.KeyValue, bool) {
	switch v := any(item).(type) {
	case string:
		return AttrItem.String(v), true
	case fmt.Stringer:
		return AttrItem.String(v.String()), true
	}
	return attribute.KeyValue{}, false
}

// Done marks item as done processing and ends its workqueue.process span.
func (t *Traced[T]) Done(item T) {
	if t.tracing() {
		t.mu.Lock()
		span := t.active[item]
		delete(t.active, item)
		t.mu.Unlock()
		if span != nil {
			span.End()
		}
	}
	t.q.Done(item)
}

// Len returns the queue's length.
func (t *Traced[T]) Len() int { return t.q.Len() }

// ShutDown shuts the queue down (client-go's ShutDown).
func (t *Traced[T]) ShutDown() {
	t.q.ShutDown()
	if t.stopMetrics != nil {
		t.stopMetrics()
	}
}

// ShutDownWithDrain shuts the queue down and waits for the items being
// processed to be done (client-go's ShutDownWithDrain).
func (t *Traced[T]) ShutDownWithDrain() {
	t.q.ShutDownWithDrain()
	if t.stopMetrics != nil {
		t.stopMetrics()
	}
}

// ShuttingDown reports whether the queue is shutting down.
func (t *Traced[T]) ShuttingDown() bool { return t.q.ShuttingDown() }

// Forget tells the rate limiter to forget item's retries.
func (t *Traced[T]) Forget(item T) { t.q.Forget(item) }

// NumRequeues returns how often item was rate-limited.
func (t *Traced[T]) NumRequeues(item T) int { return t.q.NumRequeues(item) }
