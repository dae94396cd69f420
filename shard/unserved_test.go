//go:build !race

// Two protoactor cluster members in one process: not under -race (see
// cluster_test.go).

package shard_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard"
)

// A range handed over make-before-break goes undelivered only from the
// old deliverer's release to the new one's delivery, not while the new one
// lists it: the new owner's unserved time is below its acquisition's
// duration.
func TestMembersHandoffUnservedTime(t *testing.T) {
	src := newMemServer()
	for i := range 200 {
		src.create(fmt.Sprintf("o%d", i))
	}
	// The default lease timings: a member fenced on a loaded machine
	// would take its ranges again without a release.
	g := newGroup(t, src, shard.WithRanges(8), defaultLeaseTimings())
	defer g.stopAll()
	g.join()
	eventually(t, 30*time.Second, "m1 settled alone", g.settled)
	m2 := g.join()
	eventually(t, 60*time.Second, "two members settled", g.settled)
	handed := 0
	for _, h := range m2.inf.Status().Handovers {
		if h.Kind != "acquire" {
			continue
		}
		if h.From == "" {
			t.Errorf("range %v came to m2 from no deliverer", h.Range)
			continue
		}
		handed++
		if h.Unserved <= 0 || h.Unserved >= h.Duration {
			t.Errorf("range %v handed over: unserved %v, took %v; want 0 < unserved < took", h.Range, h.Unserved, h.Duration)
		}
		t.Logf("range %v: listed and handed over in %v, unserved %v", h.Range, h.Duration, h.Unserved)
	}
	if handed == 0 {
		t.Fatal("m2 acquired no range")
	}
}

// The old owner hands a range over before the range's informer has
// stopped: its intake is paused and its handlers are detached, so nothing
// of it reaches a handler, and the end of its watch (here a watch whose
// Stop waits until the test lets it) does not keep the range unserved: the
// new owner delivers the range while the old owner's informer for it
// still runs. A release that waited for its informer to stop would hand
// nothing over until then.
func TestMembersHandOverBeforeTheInformerStops(t *testing.T) {
	src := newMemServer()
	for i := range 100 {
		src.create(fmt.Sprintf("o%d", i))
	}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	src.mu.Lock()
	src.stopGate = gate // m1's watches: their Stop waits
	src.mu.Unlock()
	// The default lease timings: m1 fenced on a loaded machine would
	// rejoin under another id, its ranges taken from the old one.
	g := newGroup(t, src, shard.WithRanges(4), defaultLeaseTimings())
	defer g.stopAll()
	defer open() // before stopAll
	m1 := g.join()
	eventually(t, 30*time.Second, "m1 settled alone", g.settled)
	src.mu.Lock()
	src.stopGate = nil // m2's stop at once
	src.mu.Unlock()
	m2 := g.join()
	eventually(t, 30*time.Second, "two members settled", g.settled)
	running, delivered := shard.RunningRangeInformers(m1.inf), len(m1.inf.Status().Delivered)
	handed := 0
	for _, h := range m2.inf.Status().Handovers {
		if h.Kind == "acquire" && h.From == m1.inf.Member() {
			handed++
		}
	}
	if handed == 0 {
		st := m1.inf.Status()
		t.Fatalf("m2 took no range from m1 (%s; rejoins %d, fenced %q): m2's handovers %+v", m1.inf.Member(), st.Rejoins, st.Fenced, m2.inf.Status().Handovers)
	}
	if running <= delivered {
		t.Fatalf("m2 took %d ranges from m1, and m1 runs %d range informers for the %d ranges it delivers: "+
			"the released ranges' informers had stopped before m2 delivered them", handed, running, delivered)
	}
	t.Logf("m2 delivers %d ranges taken from m1, whose informers for them still run (their watches stopping)", handed)
}
