// Package actors is actorinformer's public API: SharedIndexInformer, a
// drop-in implementation of client-go's cache.SharedIndexInformer whose
// stages — reflector, delta queue, indexer, and one listener per handler —
// are protoactor actors talking through typed messages, with an
// OpenTelemetry trace following every delta from the watch to each handler;
// and Factory, which runs informers over one shared actor system, typed
// through generics or dynamic for custom resources, and can stop a single
// informer.
//
// Swapping client-go's informer for this one is one line:
//
//	inf := actors.NewSharedIndexInformer(lw, &corev1.Pod{}, resync, indexers)
//
// Tracing and metrics are off (no-op) unless WithTracerProvider and
// WithMeterProvider are given; the library never touches OpenTelemetry's
// globals.
package actors
