package actors

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
)

// registration is the handle AddEventHandler returns.
type registration struct {
	l   *listener
	inf *SharedIndexInformer
}

// HasSynced reports whether the informer has synced and every notification
// of the initial list (or, for a handler added later, of the cache as it was
// then) has been delivered to this handler.
func (r *registration) HasSynced() bool {
	return r.inf.HasSynced() && r.l.initialDone.Load() && r.l.pending.Load() == 0
}

// HasSyncedChecker returns a DoneChecker for HasSynced.
func (r *registration) HasSyncedChecker() cache.DoneChecker {
	return newPollChecker("handler "+r.l.name, r.HasSynced, r.inf.stoppedCh)
}

func (r *registration) stats() HandlerStats {
	return HandlerStats{
		Name:      r.l.name,
		Delivered: r.l.delivered.Load(),
		Backlog:   r.l.backlog.N.Load(),
		Panics:    r.l.panics.Load(),
	}
}

// pollChecker is a cache.DoneChecker whose channel closes once done()
// holds. It polls only after Done is first called, and stops polling when
// the informer stops.
type pollChecker struct {
	name string
	done func() bool
	stop <-chan struct{}
	once sync.Once
	ch   chan struct{}
}

func newPollChecker(name string, done func() bool, stop <-chan struct{}) *pollChecker {
	return &pollChecker{name: name, done: done, stop: stop, ch: make(chan struct{})}
}

func (p *pollChecker) Name() string { return p.name }

func (p *pollChecker) Done() <-chan struct{} {
	p.once.Do(func() {
		if p.done() {
			close(p.ch)
			return
		}
		go func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-t.C:
					if p.done() {
						close(p.ch)
						return
					}
				}
			}
		}()
	})
	return p.ch
}
