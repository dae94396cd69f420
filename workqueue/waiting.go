package workqueue

import (
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Waiting is the store of client-go's queue, the items waiting for a worker
// (workqueue.Queue, given in TypedQueueConfig.Queue), that also knows how
// long the oldest of them has waited: [Waiting.Oldest]. It keeps the items
// in another store, client-go's slice FIFO by default, and only notes when
// each was pushed.
//
// An item's wait starts when the queue puts it in the store: at its Add, at
// the end of its AddAfter delay (or of its rate limit), or, for an item
// added again while a worker had it, at that worker's Done. An Add of an
// item already waiting does not restart it. Push, Pop and Touch cost an
// amortized O(1) (a clock read at Push; over a store given to
// NewWaiting, a map write at Push and delete at Pop); Oldest is O(1) and
// may be called at any time, by any goroutine. A Waiting serves one queue:
// its other methods run under that queue's lock, as client-go calls them.
type Waiting[T comparable] struct {
	inner workqueue.Queue[T]
	clock clock.PassiveClock

	// fifo: inner is client-go's FIFO, made here, so items come out in
	// the order they went in and live is not needed.
	fifo bool

	// epoch is when the store was made: the pushes' times are offsets
	// from it (clock.Since reads only the monotonic clock).
	epoch time.Time
	// Push and Pop are called under the queue's lock; Oldest reads only
	// these two, set by them.
	frontAt atomic.Int64 // the front entry's at + 1; 0: none waits
	waiting atomic.Int64

	seq  uint64
	live map[T]uint64 // item → seq of its entry in pushed (not with fifo)
	// pushed holds the entries in push order from head on: the entry at
	// head is always live (its item is still in the store), those after it
	// may be stale (popped out of order by a store that is not a FIFO).
	pushed []pushed[T]
	head   int
}

type pushed[T comparable] struct {
	item T
	seq  uint64
	at   time.Duration // since epoch
}

var _ workqueue.Queue[string] = (*Waiting[string])(nil)

// NewWaiting keeps the items in inner (nil: client-go's slice FIFO,
// workqueue.DefaultQueue) and reads the time from clk (nil: the real
// clock; give it the queue's, TypedQueueConfig.Clock, in tests).
func NewWaiting[T comparable](inner workqueue.Queue[T], clk clock.PassiveClock) *Waiting[T] {
	w := &Waiting[T]{inner: inner, clock: clk}
	if inner == nil {
		w.inner, w.fifo = workqueue.DefaultQueue[T](), true
	} else {
		w.live = map[T]uint64{}
	}
	if clk == nil {
		w.clock = clock.RealClock{}
	}
	w.epoch = w.clock.Now()
	return w
}

// Touch implements workqueue.Queue: the item was added again while it
// waited; its wait goes on.
func (w *Waiting[T]) Touch(item T) { w.inner.Touch(item) }

// Push implements workqueue.Queue: item starts waiting. client-go never
// pushes an item already in the store.
func (w *Waiting[T]) Push(item T) {
	at := w.clock.Since(w.epoch)
	w.seq++
	if !w.fifo {
		w.live[item] = w.seq
	}
	w.pushed = append(w.pushed, pushed[T]{item: item, seq: w.seq, at: at})
	if len(w.pushed)-w.head == 1 {
		w.frontAt.Store(int64(at) + 1)
	}
	w.waiting.Add(1)
	w.inner.Push(item)
}

// Len implements workqueue.Queue.
func (w *Waiting[T]) Len() int { return w.inner.Len() }

// Pop implements workqueue.Queue: a worker gets item.
func (w *Waiting[T]) Pop() T {
	item := w.inner.Pop()
	if w.fifo {
		w.pushed[w.head] = pushed[T]{}
		w.head++
	} else {
		delete(w.live, item)
		for w.head < len(w.pushed) && w.live[w.pushed[w.head].item] != w.pushed[w.head].seq {
			w.pushed[w.head] = pushed[T]{} // no reference kept to a popped item
			w.head++
		}
	}
	w.compact()
	if w.head < len(w.pushed) {
		w.frontAt.Store(int64(w.pushed[w.head].at) + 1)
	} else {
		w.frontAt.Store(0)
	}
	w.waiting.Add(-1)
	return item
}

// compact reclaims the space of the popped entries, ahead of head or stale
// after it, once they are at least half of the slice: amortized O(1).
func (w *Waiting[T]) compact() {
	n := len(w.pushed)
	switch {
	case w.head == n:
		clear(w.pushed)
		w.pushed, w.head = w.pushed[:0], 0
	case !w.fifo && n-w.head > 2*len(w.live)+16: // stale entries behind a live head
		keep := w.pushed[:0]
		for _, e := range w.pushed[w.head:] {
			if w.live[e.item] == e.seq {
				keep = append(keep, e)
			}
		}
		clear(w.pushed[len(keep):])
		w.pushed, w.head = keep, 0
	case w.head > 16 && w.head >= n/2:
		m := copy(w.pushed, w.pushed[w.head:])
		clear(w.pushed[m:])
		w.pushed, w.head = w.pushed[:m], 0
	}
}

// Oldest returns how long the item that has waited longest has waited, and
// how many items wait; 0, 0 when none does. It may be called by any
// goroutine at any time (the two are read apart: one may be a push or pop
// ahead of the other).
func (w *Waiting[T]) Oldest() (age time.Duration, waiting int) {
	at := w.frontAt.Load()
	if at == 0 {
		return 0, 0
	}
	return max(w.clock.Since(w.epoch)-time.Duration(at-1), 0), int(w.waiting.Load())
}
