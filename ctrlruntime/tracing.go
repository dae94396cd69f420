package ctrlruntime

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// Tracing is TypedTracing for controllers of reconcile.Request.
type Tracing = TypedTracing[reconcile.Request]

// NewTracing returns the Tracing of one controller of reconcile.Request.
func NewTracing(tp trace.TracerProvider, mp metric.MeterProvider) *Tracing {
	return NewTypedTracing[reconcile.Request](tp, mp)
}

// TypedTracing carries traces into the Reconcile calls of ONE controller:
// give NewQueue to the controller's options, wrap its reconciler with
// Reconciler, and watch through [Kind] with it so that the requests its
// handlers enqueue link to the deltas' handler spans.
//
//	tr := ctrlruntime.NewTracing(tp, mp)
//	ctrl.NewControllerManagedBy(mgr).Named("secrets").
//		WithOptions(controller.Options{NewQueue: tr.NewQueue}).
//		WatchesRawSource(ctrlruntime.Kind(tr, mgr.GetCache(), &corev1.Secret{}, h)).
//		Complete(tr.Reconciler(r))
//
// Its methods may be called by multiple goroutines simultaneously.
type TypedTracing[R comparable] struct {
	tp trace.TracerProvider
	mp metric.MeterProvider

	mu    sync.Mutex
	name  string // the controller's, set by NewQueue
	queue *tracedQueue[R]
	spans map[R]trace.Span // processing spans of the requests being reconciled
}

// NewTypedTracing returns the TypedTracing of one controller: tp traces
// (nil: nothing is traced), mp records the queue's metrics (nil: the queue
// reports to client-go's global workqueue metrics provider, which
// controller-runtime registers).
func NewTypedTracing[R comparable](tp trace.TracerProvider, mp metric.MeterProvider) *TypedTracing[R] {
	return &TypedTracing[R]{tp: tp, mp: mp, spans: map[R]trace.Span{}}
}

// NewQueue is controller.TypedOptions.NewQueue: client-go's rate-limiting
// queue named after the controller (not controller-runtime's priority
// queue), wrapped by actorinformer's traced queue. A TypedTracing serves one
// controller: NewQueue panics when called a second time.
func (t *TypedTracing[R]) NewQueue(controllerName string, rl workqueue.TypedRateLimiter[R]) workqueue.TypedRateLimitingInterface[R] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.queue != nil {
		panic("ctrlruntime: a Tracing serves one controller; NewQueue called again for " + controllerName + " after " + t.name)
	}
	t.name = controllerName
	t.queue = &tracedQueue[R]{Traced: aiworkqueue.NewRateLimitingQueue(controllerName, rl, t.tp, t.mp), t: t}
	return t.queue
}

// ControllerName returns the name NewQueue was given, "" before.
func (t *TypedTracing[R]) ControllerName() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name
}

// traced returns the controller's traced queue, nil before NewQueue.
func (t *TypedTracing[R]) traced() *aiworkqueue.Traced[R] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.queue == nil {
		return nil
	}
	return t.queue.Traced
}

// Reconciler wraps r so that the ctx of its Reconcile carries the
// workqueue.process span of the request's processing: trace.SpanFromContext
// (ctx) is that span, and spans started from ctx are its children. The rest
// of ctx (cancellation, the controller's logger) is the controller's.
func (t *TypedTracing[R]) Reconciler(r reconcile.TypedReconciler[R]) reconcile.TypedReconciler[R] {
	return &tracedReconciler[R]{t: t, r: r}
}

type tracedReconciler[R comparable] struct {
	t *TypedTracing[R]
	r reconcile.TypedReconciler[R]
}

func (tr *tracedReconciler[R]) Reconcile(ctx context.Context, req R) (reconcile.Result, error) {
	tr.t.mu.Lock()
	span := tr.t.spans[req]
	tr.t.mu.Unlock()
	if span != nil {
		ctx = trace.ContextWithSpan(ctx, span)
	}
	return tr.r.Reconcile(ctx, req)
}

// tracedQueue is the traced queue whose Get (controller-runtime's workers
// call Get, not GetCtx) keeps the processing span for the Reconciler.
type tracedQueue[R comparable] struct {
	*aiworkqueue.Traced[R]
	t *TypedTracing[R]
}

func (q *tracedQueue[R]) Get() (R, bool) {
	ctx, item, shutdown := q.GetCtx()
	if shutdown {
		return item, shutdown
	}
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		q.t.mu.Lock()
		q.t.spans[item] = span
		q.t.mu.Unlock()
	}
	return item, false
}

func (q *tracedQueue[R]) Done(item R) {
	q.t.mu.Lock()
	delete(q.t.spans, item)
	q.t.mu.Unlock()
	q.Traced.Done(item)
}
