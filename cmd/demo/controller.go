package main

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	aiworkqueue "github.com/actorinformer/actorinformer/workqueue"
)

// queueName names the controller's queue in its metrics.
const queueName = "demo"

// controller is the demo's controller: its event handler (the first of the
// demo's handlers) enqueues the key of each object with the handler's
// context, and its workers take the keys from the traced queue and
// "reconcile" them, reading the object from the informer's cache. The
// workers' reconcile span (userSpanName) is the child of the queue's
// workqueue.process span, which links to the handler spans of the deltas
// that enqueued the key.
type controller struct {
	queue   *aiworkqueue.Traced[string]
	indexer cache.Indexer
	tracer  trace.Tracer
	workers int
	wg      sync.WaitGroup

	reconciles atomic.Int64
	found      atomic.Int64 // reconciles that found the object in the cache

	// released, when not nil, says whether a key belongs to a range the
	// member has released (shard.Informer.Released): the worker drops it
	// instead of reconciling it, since the range's new owner has it.
	released        func(key string) bool
	releasedDropped atomic.Int64
}

// ctlStats are a controller's counters: the queue's depth now, reconciles,
// those that found the object, keys dropped as released, and workers.
type ctlStats struct {
	depth                       int
	reconciles, found, released int64
	workers                     int
}

func (c *controller) stats() ctlStats {
	return ctlStats{depth: c.queue.Len(), reconciles: c.reconciles.Load(), found: c.found.Load(),
		released: c.releasedDropped.Load(), workers: c.workers}
}

// newController builds the controller's queue, named name in its metrics,
// with the demo's providers (mp may be nil); indexer is the informer's
// cache.
func newController(name string, indexer cache.Indexer, workers int, tp trace.TracerProvider, mp metric.MeterProvider) *controller {
	return &controller{
		queue:   aiworkqueue.NewRateLimitingQueue(name, workqueue.DefaultTypedControllerRateLimiter[string](), tp, mp),
		indexer: indexer,
		tracer:  tp.Tracer(demoScope),
		workers: workers,
	}
}

// start starts the workers; stop ends them.
func (c *controller) start() {
	for range c.workers {
		c.wg.Go(c.work)
	}
}

// stop shuts the queue down and waits for the workers, which first finish
// the keys still queued.
func (c *controller) stop() {
	c.queue.ShutDown()
	c.wg.Wait()
}

func (c *controller) work() {
	for c.processNext() {
	}
}

func (c *controller) processNext() bool {
	ctx, key, shutdown := c.queue.GetCtx()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if c.released != nil && c.released(key) {
		c.releasedDropped.Add(1)
		c.queue.Forget(key)
		return true
	}
	c.reconcile(ctx, key)
	c.queue.Forget(key) // reconcile never fails: no retries to forget
	return true
}

// reconcile stands for a controller's work: it reads the object from the
// cache. Only processings the queue traces get a span.
func (c *controller) reconcile(ctx context.Context, key string) {
	c.reconciles.Add(1)
	obj, exists, err := c.indexer.GetByKey(key)
	if exists {
		c.found.Add(1)
	}
	if !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	result := "deleted"
	switch {
	case err != nil:
		result = "error"
	case exists:
		result = "exists"
	}
	attrs := []attribute.KeyValue{attribute.String("demo.key", key), attribute.String("demo.result", result)}
	if m, ok := obj.(interface{ GetResourceVersion() string }); ok && exists {
		attrs = append(attrs, attribute.String("demo.rv", m.GetResourceVersion()))
	}
	_, span := c.tracer.Start(ctx, userSpanName, trace.WithAttributes(attrs...))
	span.End()
}

// enqueuer is the controller's ContextEventHandler: the context carries the
// delta's handler span, which the queue records for the key's next
// processing to link to.
type enqueuer struct {
	calls *atomic.Int64
	queue *aiworkqueue.Traced[string]
}

func (h *enqueuer) OnAdd(ctx context.Context, obj any, _ bool) { h.enqueue(ctx, obj) }
func (h *enqueuer) OnUpdate(ctx context.Context, _, obj any)   { h.enqueue(ctx, obj) }
func (h *enqueuer) OnDelete(ctx context.Context, obj any)      { h.enqueue(ctx, obj) }

func (h *enqueuer) enqueue(ctx context.Context, obj any) {
	h.calls.Add(1)
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		h.queue.AddCtx(ctx, key)
	}
}
