package actors

import (
	"sync"

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
	return r.inf.signals.add("handler "+r.l.name, r.HasSynced)
}

// ShutdownChan is closed once the handler's listener has exited: no handler
// call is running or will run. That happens after RemoveEventHandler or once
// the informer has stopped. cache.ShutDownEventHandler waits on it, as on
// client-go's registrations.
func (r *registration) ShutdownChan() <-chan struct{} { return r.l.exited }

func (r *registration) stats() HandlerStats {
	return HandlerStats{
		Name:      r.l.name,
		Delivered: r.l.counters.Delivered.Load(),
		Backlog:   r.l.counters.Backlog(),
		Panics:    r.l.counters.Panics.Load(),
	}
}

// doneSignal is a cache.DoneChecker whose channel closes once done()
// holds. It does not poll and starts no goroutine: the informer re-checks
// its signals (syncSignals.poke) whenever what they depend on moves (the
// queue syncing, a listener delivering its initial notifications).
type doneSignal struct {
	name string
	done func() bool
	once sync.Once
	ch   chan struct{}
}

func (d *doneSignal) Name() string { return d.name }

func (d *doneSignal) Done() <-chan struct{} { return d.ch }

// check closes the channel if done() holds, and reports whether it is
// closed.
func (d *doneSignal) check() bool {
	if d.done() {
		d.once.Do(func() { close(d.ch) })
		return true
	}
	return false
}

// syncSignals holds an informer's open done signals.
type syncSignals struct {
	mu   sync.Mutex
	open []*doneSignal
}

// add returns a new signal for done, already closed if done() holds.
func (s *syncSignals) add(name string, done func() bool) *doneSignal {
	d := &doneSignal{name: name, done: done, ch: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Checked under the lock, after which every poke sees it: a change that
	// makes done() hold is followed by a poke.
	if !d.check() {
		s.open = append(s.open, d)
	}
	return d
}

// poke re-checks the open signals, dropping those that closed.
func (s *syncSignals) poke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	open := s.open[:0]
	for _, d := range s.open {
		if !d.check() {
			open = append(open, d)
		}
	}
	clear(s.open[len(open):])
	s.open = open
}
