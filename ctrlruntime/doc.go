// Package ctrlruntime plugs actorinformer into controller-runtime (v0.25): a
// manager's cache made of actorinformer's informers, and traces carried from
// an informer's deltas into Reconcile.
//
// It is a Go module of its own, so that the core module does not depend on
// controller-runtime.
//
// # Informers
//
// [Informers] builds every informer of a manager's cache in one shared actor
// system and shuts the system down when the cache stops:
//
//	informers := ctrlruntime.NewInformers(actors.WithTracerProvider(tp))
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{NewCache: informers.NewCache})
//
// Each informer is named after its kind (ConfigMap.v1, Deployment.v1.apps,
// ConfigMap.v1/metadata for metadata-only informers, "#2"... for the next
// informers of a kind, one per namespace with DefaultNamespaces) and records
// its group, version and resource. [NewInformer] is the simple form for
// cache.Options.NewInformer: each informer runs its own actor system.
//
// # Sharding
//
// [Sharded] runs a controller on several replicas without leader election:
// its NewCache makes the cache's informers of the given kinds one shard
// group hashed by namespace (package shard), and its Reconciler reconciles
// only the namespaces of the ranges the replica delivers, holding a range's
// release until its reconciles there have returned.
//
// # Traces into Reconcile
//
// A [Tracing] serves one controller: its NewQueue gives the controller
// actorinformer's traced queue (workqueue.Traced over client-go's
// rate-limiting queue, instead of controller-runtime's priority queue), and
// its Reconciler wrapper hands Reconcile a ctx whose span,
// trace.SpanFromContext(ctx), is the request's workqueue.process span.
// [Kind] is a source whose handler is an actorinformer context handler: the
// requests it enqueues record the delta's handler span, and the
// workqueue.process span links to it.
//
//	tr := ctrlruntime.NewTracing(tp, mp) // tracer and meter providers, either may be nil
//	err := ctrl.NewControllerManagedBy(mgr).Named("secrets").
//		WatchesRawSource(ctrlruntime.Kind(tr, mgr.GetCache(), &corev1.Secret{}, h)).
//		WithOptions(controller.Options{NewQueue: tr.NewQueue}).
//		Complete(tr.Reconciler(r))
//
// # What cannot be linked
//
// Requests enqueued by controller-runtime's own sources (the builder's For,
// Owns and Watches, source.Kind) start a workqueue.process span with no
// link: their handler (controller-runtime's internal source.EventHandler)
// calls the user's handler with the controller's context, not the delta's,
// and adds to the queue without any context. Use [Kind] with
// WatchesRawSource for the watches whose traces matter.
//
// Neither can [Kind] link when the cache's informer is not actorinformer's
// as such: controller-runtime's default informers, or a cache with
// DefaultNamespaces or several namespaces, whose informer for a kind is a
// wrapper over one informer per namespace. It then adds a plain handler and
// still works, untraced.
//
// Handlers added by controller-runtime's sources are all of one Go type, so
// in actorinformer's spans, metrics and Stats they are all named
// "sigs.k8s.io/controller-runtime/pkg/internal/source.EventHandler[...]",
// whatever the controller; [Kind]'s handler is named
// "<controller>/<informer>", e.g. "secrets/Secret.v1".
package ctrlruntime
