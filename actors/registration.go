package actors

import (
	"k8s.io/client-go/tools/cache"
)

// registration is the handle AddEventHandler returns.
type registration struct {
	l   *handlerListener
	inf *SharedIndexInformer
}

// HasSynced reports whether the informer has synced and every notification
// of the initial list (or, for a handler added later, of the cache as it was
// then) has been delivered to this handler.
func (r *registration) HasSynced() bool {
	return r.inf.HasSynced() && r.l.counters.InitialDone.Load() && r.l.counters.Pending() == 0
}

// HasSyncedChecker returns a DoneChecker for HasSynced.
func (r *registration) HasSyncedChecker() cache.DoneChecker {
	return r.inf.signals.Add("handler "+r.l.name, r.HasSynced)
}

// ShutdownChan is closed once the handler's listener has exited: no handler
// call is running or will run. That happens after RemoveEventHandler or once
// the informer has stopped. cache.ShutDownEventHandler waits on it, as on
// client-go's registrations.
func (r *registration) ShutdownChan() <-chan struct{} { return r.l.exited }

// Subscribed reports whether the handler's listener is subscribed to the
// running informer's cache: it has been given the objects the cache held
// then (its initial list), and every change the cache applies from then on
// reaches it. A handler added before Run is subscribed once Run starts.
func (r *registration) Subscribed() bool { return r.l.sent.Subscribed.Load() }

// SubscribedChan returns a channel closed once Subscribed is true.
func (r *registration) SubscribedChan() <-chan struct{} { return r.l.sent.SubscribedChan() }

func (r *registration) stats() HandlerStats {
	return HandlerStats{
		Name:      r.l.name,
		Delivered: r.l.counters.Delivered.Load(),
		Backlog:   r.l.counters.Backlog(),
		Panics:    r.l.counters.Panics.Load(),
	}
}
