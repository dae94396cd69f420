// Package pulse wakes the goroutines waiting for something to change,
// instead of their polling it, at the cost of one atomic load per change
// while nobody waits: cheap enough for a per-event path.
package pulse

import "sync/atomic"

// Pulse is a change that waiters wait for: a waiter takes the channel
// (Wait) before it looks at what it waits for, and the change closes it
// (Fire), so that no change between the look and the wait is missed. The
// zero value is ready to use; it is safe for concurrent use.
type Pulse struct{ ch atomic.Pointer[chan struct{}] }

// Wait returns a channel closed at the next Fire.
func (p *Pulse) Wait() <-chan struct{} {
	for {
		if c := p.ch.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if p.ch.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// Fire wakes the waiters.
func (p *Pulse) Fire() {
	if c := p.ch.Load(); c != nil && p.ch.CompareAndSwap(c, nil) {
		close(*c)
	}
}
