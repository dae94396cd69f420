package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/actorinformer/actorinformer/actors"
	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// contextHandlerAdder is the part of *actors.SharedIndexInformer the source
// needs; controller-runtime's cache.Informer hides it.
type contextHandlerAdder interface {
	AddContextEventHandler(actors.ContextEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
	Name() string
}

// Kind is controller-runtime's source.Kind for the controller of t (add it
// with the builder's WatchesRawSource or Controller.Watch): the informer of
// obj's kind from c calls h, through predicates, for each event.
//
// When the informer is actorinformer's, the source's handler is a context
// handler named "<controller>/<informer>" (e.g. "secrets/Secret.v1"): h
// gets a ctx carrying the delta's handler span (and the controller's
// values), and the queue h adds to records that span, so the
// workqueue.process span of the Reconcile it leads to links to it. The
// controller must use t.NewQueue for that; without it (or with a nil t) the
// source adds to the controller's queue as controller-runtime's does.
//
// Otherwise (controller-runtime's default informers, or a cache with
// DefaultNamespaces, whose informer for a kind spans several informers)
// the source adds a plain handler and nothing is linked.
func Kind[O client.Object, R comparable](t *TypedTracing[R], c cache.Cache, obj O, h handler.TypedEventHandler[O, R], predicates ...predicate.TypedPredicate[O]) source.TypedSyncingSource[R] {
	return &kind[O, R]{t: t, cache: c, obj: obj, h: h, predicates: predicates}
}

type kind[O client.Object, R comparable] struct {
	t          *TypedTracing[R]
	cache      cache.Cache
	obj        O
	h          handler.TypedEventHandler[O, R]
	predicates []predicate.TypedPredicate[O]

	startedErr  chan error
	startCancel context.CancelFunc
}

func (k *kind[O, R]) String() string { return fmt.Sprintf("actorinformer kind source: %T", k.obj) }

// Start registers the handler with the informer, in the background as
// controller-runtime's Kind does (getting the informer may block until the
// cache syncs it).
func (k *kind[O, R]) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[R]) error {
	if k.cache == nil || k.h == nil {
		return errors.New("ctrlruntime.Kind needs a cache and a handler")
	}
	ctx, k.startCancel = context.WithCancel(ctx)
	k.startedErr = make(chan error, 1)
	var traced *aiworkqueue.Traced[R]
	controller := ""
	if k.t != nil {
		traced = k.t.traced()
		controller = k.t.ControllerName()
	}
	go func() {
		var (
			inf     cache.Informer
			lastErr error
		)
		if err := wait.PollUntilContextCancel(ctx, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			inf, lastErr = k.cache.GetInformer(ctx, k.obj)
			return lastErr == nil, nil
		}); err != nil {
			if lastErr != nil {
				err = fmt.Errorf("failed to get informer from cache: %w", lastErr)
			}
			k.startedErr <- err
			return
		}
		eh := &eventHandler[O, R]{ctx: ctx, queue: queue, traced: traced, h: k.h, predicates: k.predicates}
		var (
			reg toolscache.ResourceEventHandlerRegistration
			err error
		)
		if ai, ok := inf.(contextHandlerAdder); ok {
			name := ai.Name()
			if controller != "" {
				name = controller + "/" + name
			}
			reg, err = ai.AddContextEventHandler(actors.NamedContextHandler(name, eh))
		} else {
			reg, err = inf.AddEventHandler(plainEventHandler[O, R]{eh})
		}
		if err != nil {
			k.startedErr <- err
			return
		}
		if !k.cache.WaitForCacheSync(ctx) {
			k.startedErr <- errors.New("cache did not sync")
			return
		}
		if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			k.startedErr <- errors.New("handler did not sync")
		}
		close(k.startedErr)
	}()
	return nil
}

// WaitForSync waits until the handler has had the informer's initial list.
func (k *kind[O, R]) WaitForSync(ctx context.Context) error {
	select {
	case err := <-k.startedErr:
		return err
	case <-ctx.Done():
		k.startCancel()
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil
		}
		return fmt.Errorf("timed out waiting for cache to be synced for %s", k)
	}
}

// eventHandler is controller-runtime's source EventHandler as an
// actors.ContextEventHandler.
type eventHandler[O client.Object, R comparable] struct {
	ctx        context.Context // the controller's
	queue      workqueue.TypedRateLimitingInterface[R]
	traced     *aiworkqueue.Traced[R] // nil: add to queue without context
	h          handler.TypedEventHandler[O, R]
	predicates []predicate.TypedPredicate[O]
}

// with returns the controller's context carrying the span of deltaCtx, and
// the queue h adds to.
func (e *eventHandler[O, R]) with(deltaCtx context.Context) (context.Context, context.CancelFunc, workqueue.TypedRateLimitingInterface[R]) {
	ctx, cancel := context.WithCancel(e.ctx)
	span := trace.SpanFromContext(deltaCtx)
	if !span.SpanContext().IsValid() {
		return ctx, cancel, e.queue
	}
	ctx = trace.ContextWithSpan(ctx, span)
	if e.traced == nil {
		return ctx, cancel, e.queue
	}
	return ctx, cancel, &ctxQueue[R]{TypedRateLimitingInterface: e.queue, ctx: ctx, traced: e.traced}
}

func (e *eventHandler[O, R]) OnAdd(deltaCtx context.Context, obj any, isInInitialList bool) {
	o, ok := obj.(O)
	if !ok {
		return
	}
	ev := event.TypedCreateEvent[O]{Object: o, IsInInitialList: isInInitialList}
	for _, p := range e.predicates {
		if !p.Create(ev) {
			return
		}
	}
	ctx, cancel, q := e.with(deltaCtx)
	defer cancel()
	e.h.Create(ctx, ev, q)
}

func (e *eventHandler[O, R]) OnUpdate(deltaCtx context.Context, oldObj, newObj any) {
	oldO, ok1 := oldObj.(O)
	newO, ok2 := newObj.(O)
	if !ok1 || !ok2 {
		return
	}
	ev := event.TypedUpdateEvent[O]{ObjectOld: oldO, ObjectNew: newO}
	for _, p := range e.predicates {
		if !p.Update(ev) {
			return
		}
	}
	ctx, cancel, q := e.with(deltaCtx)
	defer cancel()
	e.h.Update(ctx, ev, q)
}

func (e *eventHandler[O, R]) OnDelete(deltaCtx context.Context, obj any) {
	ev := event.TypedDeleteEvent[O]{}
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		ev.DeleteStateUnknown = true
		obj = tomb.Obj
	}
	o, ok := obj.(O)
	if !ok {
		return
	}
	ev.Object = o
	for _, p := range e.predicates {
		if !p.Delete(ev) {
			return
		}
	}
	ctx, cancel, q := e.with(deltaCtx)
	defer cancel()
	e.h.Delete(ctx, ev, q)
}

// plainEventHandler is eventHandler for informers that are not
// actorinformer's.
type plainEventHandler[O client.Object, R comparable] struct{ e *eventHandler[O, R] }

func (p plainEventHandler[O, R]) OnAdd(obj any, initial bool) {
	p.e.OnAdd(context.Background(), obj, initial)
}
func (p plainEventHandler[O, R]) OnUpdate(o, n any) { p.e.OnUpdate(context.Background(), o, n) }
func (p plainEventHandler[O, R]) OnDelete(obj any)  { p.e.OnDelete(context.Background(), obj) }

// ctxQueue is the controller's queue for one event: its adds go through the
// traced queue with the event's context, so they record the handler span.
type ctxQueue[R comparable] struct {
	workqueue.TypedRateLimitingInterface[R]
	ctx    context.Context
	traced *aiworkqueue.Traced[R]
}

func (q *ctxQueue[R]) Add(item R)                       { q.traced.AddCtx(q.ctx, item) }
func (q *ctxQueue[R]) AddAfter(item R, d time.Duration) { q.traced.AddAfterCtx(q.ctx, item, d) }
func (q *ctxQueue[R]) AddRateLimited(item R)            { q.traced.AddRateLimitedCtx(q.ctx, item) }
