package shard

import "sync/atomic"

// pulse wakes the goroutines waiting for something to change, instead of
// their polling it: a waiter takes the channel (wait) before it looks, and
// the change closes it (fire). While nobody waits, a change costs one
// atomic load.
type pulse struct{ ch atomic.Pointer[chan struct{}] }

// wait returns a channel closed at the next fire.
func (p *pulse) wait() <-chan struct{} {
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

// fire wakes the waiters.
func (p *pulse) fire() {
	if c := p.ch.Load(); c != nil && p.ch.CompareAndSwap(c, nil) {
		close(*c)
	}
}
