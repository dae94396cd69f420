package fifo

import "sync"

// deltasPool recycles the *Deltas messages of watch events: a busy watch
// sends one per handful of events, and the queue copies their items as it
// receives them.
var deltasPool = sync.Pool{New: func() any { return new(Deltas) }}

// maxPooledDeltas: messages that carried more deltas (a burst) are left to
// the garbage collector rather than pinned in the pool.
const maxPooledDeltas = 1024

// NewDeltas returns an empty *Deltas with room for n items, recycled when
// one is free. Send it to the queue actor, which recycles it once it has
// queued the items; do not touch it after sending it.
func NewDeltas(n int) *Deltas {
	d := deltasPool.Get().(*Deltas)
	if cap(d.Items) < n {
		d.Items = make([]Delta, 0, n)
	}
	return d
}

// recycle gives d back to the pool, without the objects it references.
func recycle(d *Deltas) {
	if cap(d.Items) > maxPooledDeltas {
		return
	}
	clear(d.Items)
	d.Items = d.Items[:0]
	deltasPool.Put(d)
}
