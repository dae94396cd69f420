// Package workqueue carries an informer delta's trace on into a controller's
// worker: a handler enqueues a key with the context it was given, and the
// worker that later processes the key gets a span linked to every handler
// span that enqueued it.
//
// It has client-go's package name: import it as aiworkqueue, and client-go's
// under its own name.
//
// [Traced] wraps client-go's rate-limiting workqueue and is one itself, so it
// drops in where the queue was:
//
//	queue := aiworkqueue.New(q, tp) // or aiworkqueue.NewRateLimitingQueue(name, rl, tp, mp)
//	// handler (an actors.ContextEventHandler):
//	queue.AddCtx(ctx, key)
//	// worker:
//	ctx, key, shutdown := queue.GetCtx()
//	defer queue.Done(key)
//	reconcile(ctx, key) // spans started from ctx are children of workqueue.process
//
// The span of one processing, workqueue.process, starts when the worker gets
// the item and ends with Done. It is the root of a trace of its own (one
// processing may merge several adds, from several deltas' traces) and links
// to the span recorded by each add since the item was last handed out, up to
// [MaxLinks]. Its attributes and the metrics of [NewOTelMetricsProvider] are
// listed in docs/tracing.md.
//
// With no tracer provider (the default) or a no-op one, Traced only
// delegates: no clock read, no lock, no allocation beyond the queue's own.
// Built with the actorinformer_notrace tag, tracing is compiled out and the
// providers are ignored, as in the rest of the module.
package workqueue
