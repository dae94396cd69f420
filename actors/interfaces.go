package actors

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
)

// The interfaces below name what this package's values offer beyond the
// client-go interfaces they are declared as, for the packages built on it
// (package shard) and for users; the values said implement them, which is
// checked at compile time.

// Registration is what the informer's AddEventHandler methods return,
// declared as client-go's cache.ResourceEventHandlerRegistration.
type Registration interface {
	cache.ResourceEventHandlerRegistration
	// ShutdownChan is closed once the handler's listener has exited: no
	// call of the handler is running or will run. That happens after
	// RemoveEventHandler, or once the informer has stopped.
	// cache.ShutDownEventHandler waits on it, as on client-go's
	// registrations.
	ShutdownChan() <-chan struct{}
	// Subscribed reports whether the handler's listener is subscribed to
	// the running informer's cache: its initial list holds what the cache
	// held then, and every change the cache applies from then on reaches
	// it. AddEventHandler on a running informer returns before that; a
	// caller that changes what the cache receives (as shard does when it
	// gives a range to its handlers) waits for it.
	Subscribed() bool
}

// Named is a handler that carries its name for spans, metrics, logs and
// Stats: what NamedHandler, NamedContextHandler, WrapHandler, Coalesced
// and CoalescedContext return, and the typed handlers.
type Named interface {
	HandlerName() string
}

// Store is the cache the informer's GetStore and GetIndexer return,
// declared as client-go's cache.Store and cache.Indexer: a cache.Indexer
// that also counts its objects, without listing them.
type Store interface {
	cache.Indexer
	// Len returns the number of objects cached.
	Len() int
}

var (
	_ Registration = (*registration)(nil)
	_ Named        = namedHandler{}
	_ Named        = namedContextHandler{}
	_ Named        = coalescedHandler{}
	_ Named        = coalescedContextHandler{}
	_ Named        = typedHandler[*corev1.Pod]{}
	_ Store        = (*indexer.Store)(nil)
)
