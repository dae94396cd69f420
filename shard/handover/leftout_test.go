package handover_test

import (
	"slices"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A member the others cannot reach (it advertises an address no one can
// dial: every message to it bounces, its own go out) costs the group
// nothing: the reachable members leave it out of their views and keep
// serving every range, and its view leaving them out fences none of them.
// Once it can be reached, it joins. (A move among them still waits for
// its answer, as for any lease holder's, until its lease is void.)
func TestUnreachableMemberFencesNone(t *testing.T) {
	w := newWorld(t, 16)
	w.fifo = true
	for _, n := range []string{"m1", "m2", "m3"} {
		w.exec("start " + n)
	}
	settle(t, w)
	ids := map[string]handover.MemberID{}
	for _, n := range []string{"m1", "m2", "m3"} {
		ids[n] = w.nodes[handover.NodeID(n)].member.id
	}
	healthy := func(names ...string) func() {
		return func() {
			for _, n := range names {
				m := w.nodes[handover.NodeID(n)].member
				if m == nil || m.id != ids[n] || !m.running {
					t.Fatalf("%s stopped or rejoined while x was unreachable:\n%s", n, w.dump())
				}
			}
			if un := served(w); len(un) > 0 {
				t.Fatalf("ranges %v unserved while x was unreachable:\n%s", un, w.dump())
			}
		}
	}
	w.exec("deaf x")
	w.exec("start x")
	runFor(t, w, 20000, healthy("m1", "m2", "m3"))
	if n := delivered(w, "x"); n != 0 {
		t.Fatalf("x, unreachable, delivers %d ranges", n)
	}
	w.exec("hear x")
	settle(t, w)
	if n := delivered(w, "x"); n == 0 {
		t.Fatalf("x, reachable again, delivers nothing:\n%s", w.dump())
	}
	// Unreachable again after it was heard (a cut one way): the others
	// leave it out of their views, and it fences none of them.
	x := w.nodes["x"].member.id
	w.exec("deaf x")
	runFor(t, w, 8000, nil)
	runFor(t, w, 10000, func() {
		for _, n := range []string{"m1", "m2", "m3"} {
			m := w.nodes[handover.NodeID(n)].member
			if m == nil || m.id != ids[n] || !m.running {
				t.Fatalf("%s stopped or rejoined while x was unreachable again:\n%s", n, w.dump())
			}
			if slices.Contains(m.core.Status().View, x) {
				t.Fatalf("%s's view has x, which has not heard it for 8 s:\n%s", n, w.dump())
			}
		}
	})
}
