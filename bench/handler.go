package bench

import (
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

var _ cache.ResourceEventHandler = (*Counter)(nil)

// Counter is a counting event handler. Expect sets the totals that complete
// the current phase; the phase's channel is closed by the call that reaches
// them, so waiting costs the informer nothing (no polling).
//
// With Latency set, OnUpdate stores, for the event whose object has
// Generation i, the time elapsed since the source handed it over. With
// SetDelay, every call first sleeps that long, unless Hurry was called.
//
// Its methods may be called by multiple goroutines simultaneously (an
// informer calls them from one).
type Counter struct {
	adds, initialAdds, updates, deletes, tombstones atomic.Int64
	phase                                           atomic.Pointer[phase]

	delay atomic.Int64
	hurry atomic.Bool

	lat  []int64
	sent []int64
	base time.Time
}

// Counts is what a Counter has seen.
type Counts struct {
	Adds, InitialAdds, Updates, Deletes, Tombstones int64
}

type phase struct {
	want Counts
	done chan struct{}
	once sync.Once
}

// Latency makes OnUpdate record delivery latencies: lat[i] = now−base −
// sent[i] for the event whose object has Generation i. sent is the Source's
// Record slice, lat must be as long.
func (c *Counter) Latency(lat, sent []int64, base time.Time) {
	c.lat, c.sent, c.base = lat, sent, base
}

// SetDelay makes every later call sleep d first (a slow handler).
func (c *Counter) SetDelay(d time.Duration) { c.delay.Store(int64(d)) }

// Hurry stops the Delay from now on (so a slow handler drains at once when
// the measurement is over).
func (c *Counter) Hurry() { c.hurry.Store(true) }

// Expect starts a phase that completes when the counts reach want (adds,
// updates and deletes; the other fields are ignored). The channel it returns
// is closed then (at once if they already have).
func (c *Counter) Expect(want Counts) <-chan struct{} {
	p := &phase{want: want, done: make(chan struct{})}
	c.phase.Store(p)
	c.check(p)
	return p.done
}

// Counts returns the counts so far.
func (c *Counter) Counts() Counts {
	return Counts{
		Adds:        c.adds.Load(),
		InitialAdds: c.initialAdds.Load(),
		Updates:     c.updates.Load(),
		Deletes:     c.deletes.Load(),
		Tombstones:  c.tombstones.Load(),
	}
}

func (c *Counter) check(p *phase) {
	if p != nil && c.adds.Load() >= p.want.Adds && c.updates.Load() >= p.want.Updates && c.deletes.Load() >= p.want.Deletes {
		p.once.Do(func() { close(p.done) })
	}
}

func (c *Counter) slow() {
	if d := c.delay.Load(); d > 0 && !c.hurry.Load() {
		time.Sleep(time.Duration(d))
	}
}

// OnAdd implements cache.ResourceEventHandler.
func (c *Counter) OnAdd(_ any, isInInitialList bool) {
	c.slow()
	if isInInitialList {
		c.initialAdds.Add(1)
	}
	if p := c.phase.Load(); c.adds.Add(1) >= p.wantAdds() {
		c.check(p)
	}
}

// OnUpdate implements cache.ResourceEventHandler.
func (c *Counter) OnUpdate(_, newObj any) {
	c.slow()
	if c.lat != nil {
		if pod, ok := newObj.(*corev1.Pod); ok && pod.Generation >= 0 && int(pod.Generation) < len(c.lat) {
			c.lat[pod.Generation] = int64(time.Since(c.base)) - c.sent[pod.Generation]
		}
	}
	if p := c.phase.Load(); c.updates.Add(1) >= p.wantUpdates() {
		c.check(p)
	}
}

// OnDelete implements cache.ResourceEventHandler.
func (c *Counter) OnDelete(obj any) {
	c.slow()
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.tombstones.Add(1)
	}
	if p := c.phase.Load(); c.deletes.Add(1) >= p.wantDeletes() {
		c.check(p)
	}
}

// The want accessors treat "no phase" as never complete.
func (p *phase) wantAdds() int64 {
	if p == nil {
		return 1 << 62
	}
	return p.want.Adds
}

func (p *phase) wantUpdates() int64 {
	if p == nil {
		return 1 << 62
	}
	return p.want.Updates
}

func (p *phase) wantDeletes() int64 {
	if p == nil {
		return 1 << 62
	}
	return p.want.Deletes
}
