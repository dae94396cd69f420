// Package donesignal is the one registry of cache.DoneCheckers that the
// informers hand out (HasSyncedChecker): each signal's channel closes once
// its condition holds. It does not poll and starts no goroutine: its owner
// pokes the set whenever what the conditions depend on moves.
package donesignal

import (
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Set holds the open signals. The zero value is ready to use; it is safe
// for concurrent use.
type Set struct {
	mu   sync.Mutex
	open []*signal
}

type signal struct {
	name string
	done func() bool
	once sync.Once
	ch   chan struct{}
}

func (d *signal) Name() string          { return d.name }
func (d *signal) Done() <-chan struct{} { return d.ch }

// check closes the channel if done() holds, and reports whether it is
// closed.
func (d *signal) check() bool {
	if d.done() {
		d.once.Do(func() { close(d.ch) })
		return true
	}
	return false
}

// Add returns a new signal for done, already closed if done() holds.
// done is called with the set's lock held: it must not poke the set.
func (s *Set) Add(name string, done func() bool) cache.DoneChecker {
	d := &signal{name: name, done: done, ch: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Checked under the lock, after which every poke sees it: a change that
	// makes done() hold is followed by a poke.
	if !d.check() {
		s.open = append(s.open, d)
	}
	return d
}

// Poke re-checks the open signals, dropping those that closed.
func (s *Set) Poke() {
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
