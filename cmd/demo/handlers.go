package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// userSpanName is the span that stands for the user's own work: the
// controller's reconcile, under the queue's workqueue.process span, or (with
// --workers 0) the tracing handler's, under the delta's handler span.
const userSpanName = "demo.reconcile"

// demoScope is the instrumentation scope of the demo's own spans.
const demoScope = "github.com/actorinformer/actorinformer/cmd/demo"

// demoHandler is one of the demo's event handlers and its call counter,
// which the handler's listener increments while the summary reads it.
type demoHandler struct {
	label string // what the summary calls it
	calls atomic.Int64
	// handler is what is registered with the informer, named label: a
	// cache.ResourceEventHandler or an actors.ContextEventHandler.
	handler any

	// fault is the run-time fault injected into the handler (faults.go):
	// every call goes through it.
	fault handlerFault
	// dur is the handler's own duration per call (with any injected
	// delay); age, when stamps is not nil, the event's age at the call:
	// from the informer's transform seeing the object to the handler's
	// call, for the objects whose resourceVersion ends in 0 (sampledRV).
	dur, age latencyHist
	stamps   *stampMap
}

// informer is where the demo registers its handlers: the one informer, or
// a member's sharded informer.
type informer interface {
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	AddContextEventHandler(actors.ContextEventHandler) (cache.ResourceEventHandlerRegistration, error)
}

// register adds the handler to inf, wrapped so that its calls are timed
// and go through its fault.
func (h *demoHandler) register(inf informer) error {
	var err error
	switch x := h.handler.(type) {
	case actors.ContextEventHandler:
		_, err = inf.AddContextEventHandler(actors.NamedContextHandler(h.label, &ctxWrapper{h: h, inner: x}))
	case cache.ResourceEventHandler:
		_, err = inf.AddEventHandler(actors.NamedHandler(h.label, &plainWrapper{h: h, inner: x}))
	default:
		err = fmt.Errorf("demo handler %s has type %T", h.label, x)
	}
	return err
}

// begin measures the event's age, applies the handler's fault (which may
// wait, or panic) and returns the call's start.
func (h *demoHandler) begin(obj any) time.Time {
	now := time.Now()
	if h.stamps != nil {
		if rv, ok := sampledRV(obj); ok {
			if at, ok := h.stamps.take(rv); ok {
				h.age.observe(now.Sub(at))
			}
		}
	}
	h.fault.apply()
	return now
}

// end records the call's duration, deferred so that a panicking call is
// measured too (the listener recovers the panic).
func (h *demoHandler) end(start time.Time) { h.dur.observe(time.Since(start)) }

// plainWrapper times a cache.ResourceEventHandler's calls.
type plainWrapper struct {
	h     *demoHandler
	inner cache.ResourceEventHandler
}

func (w *plainWrapper) OnAdd(obj any, initial bool) {
	defer w.h.end(w.h.begin(obj))
	w.inner.OnAdd(obj, initial)
}

func (w *plainWrapper) OnUpdate(oldObj, newObj any) {
	defer w.h.end(w.h.begin(newObj))
	w.inner.OnUpdate(oldObj, newObj)
}

func (w *plainWrapper) OnDelete(obj any) {
	defer w.h.end(w.h.begin(obj))
	w.inner.OnDelete(obj)
}

// ctxWrapper times an actors.ContextEventHandler's calls.
type ctxWrapper struct {
	h     *demoHandler
	inner actors.ContextEventHandler
}

func (w *ctxWrapper) OnAdd(ctx context.Context, obj any, initial bool) {
	defer w.h.end(w.h.begin(obj))
	w.inner.OnAdd(ctx, obj, initial)
}

func (w *ctxWrapper) OnUpdate(ctx context.Context, oldObj, newObj any) {
	defer w.h.end(w.h.begin(newObj))
	w.inner.OnUpdate(ctx, oldObj, newObj)
}

func (w *ctxWrapper) OnDelete(ctx context.Context, obj any) {
	defer w.h.end(w.h.begin(obj))
	w.inner.OnDelete(ctx, obj)
}

// newHandlers builds the demo's handlers: a context-aware one, ctl's
// enqueuer (named "controller") or, if ctl is nil, one that traces its own
// work under the delta's span (named "trace"), then the slow and the
// panicking ones if asked for, then plain counters, n in all (at least as
// many as the special ones).
func newHandlers(n int, slow time.Duration, panicEvery int, tp trace.TracerProvider, ctl *controller) []*demoHandler {
	var hs []*demoHandler
	add := func(label string) *demoHandler {
		h := &demoHandler{label: label}
		hs = append(hs, h)
		return h
	}
	if ctl != nil {
		h := add("controller")
		h.handler = &enqueuer{calls: &h.calls, queue: ctl.queue}
	} else {
		h := add("trace")
		h.handler = &tracer{calls: &h.calls, tracer: tp.Tracer(demoScope)}
	}
	if slow > 0 {
		h := add("slow")
		h.handler = &sleeper{calls: &h.calls, d: slow}
	}
	if panicEvery > 0 {
		h := add("panic")
		h.handler = &panicker{calls: &h.calls, every: int64(panicEvery)}
	}
	counters := n - len(hs)
	for i := 1; i <= counters; i++ {
		label := "count"
		if counters > 1 {
			label = fmt.Sprintf("count%d", i)
		}
		h := add(label)
		h.handler = &counter{calls: &h.calls}
	}
	return hs
}

// tracer is a ContextEventHandler: the context carries the delta's handler
// span, so the span it starts joins the delta's trace.
type tracer struct {
	calls  *atomic.Int64
	tracer trace.Tracer
}

func (h *tracer) OnAdd(ctx context.Context, obj any, _ bool) { h.handle(ctx, "add", obj) }
func (h *tracer) OnUpdate(ctx context.Context, _, obj any)   { h.handle(ctx, "update", obj) }
func (h *tracer) OnDelete(ctx context.Context, obj any)      { h.handle(ctx, "delete", obj) }

func (h *tracer) handle(ctx context.Context, what string, obj any) {
	h.calls.Add(1)
	// Only deltas the informer traces get a span: no cost for the others.
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	_, span := h.tracer.Start(ctx, userSpanName, trace.WithAttributes(
		attribute.String("demo.event", what), attribute.String("demo.key", key)))
	span.End()
}

// sleeper is a plain client-go handler that takes d per event, to show that
// a slow handler only grows its own backlog.
type sleeper struct {
	calls *atomic.Int64
	d     time.Duration
}

func (h *sleeper) OnAdd(any, bool)   { h.handle() }
func (h *sleeper) OnUpdate(_, _ any) { h.handle() }
func (h *sleeper) OnDelete(any)      { h.handle() }
func (h *sleeper) handle()           { h.calls.Add(1); time.Sleep(h.d) }

// panicker panics on every every-th event, to show that the informer
// isolates a panicking handler: it goes on with the next event.
type panicker struct {
	calls *atomic.Int64
	every int64
}

func (h *panicker) OnAdd(any, bool)   { h.handle() }
func (h *panicker) OnUpdate(_, _ any) { h.handle() }
func (h *panicker) OnDelete(any)      { h.handle() }

func (h *panicker) handle() {
	if n := h.calls.Add(1); n%h.every == 0 {
		panic(fmt.Sprintf("demo: deliberate panic on event %d", n))
	}
}

// counter only counts events.
type counter struct{ calls *atomic.Int64 }

func (h *counter) OnAdd(any, bool)   { h.calls.Add(1) }
func (h *counter) OnUpdate(_, _ any) { h.calls.Add(1) }
func (h *counter) OnDelete(any)      { h.calls.Add(1) }
