package handover_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A member that its own topology leaves out was dropped by the cluster's
// provider (on Kubernetes, its pod stopped being ready): protoactor never
// shows it again, so it is fenced, LeftOut: only a new node can rejoin.
func TestLeftOutOfItsOwnTopologyIsFenced(t *testing.T) {
	self, peer := handover.NewMemberID("self", "1"), handover.NewMemberID("peer", "1")
	c := joined(t, self, peer, 4)
	f, ok := find[*handover.Fenced](c.Step(&handover.Topology{Nodes: []handover.NodeID{peer.Node()}}))
	if !ok || !f.LeftOut {
		t.Fatalf("no Fenced{LeftOut} when the member left its topology (%+v, %v): %+v", f, ok, c.Status())
	}
}

// A member that a peer's view leaves out for HealTicks is fenced, LeftOut;
// one whose lease was revoked is fenced without LeftOut: it can rejoin on
// its node.
func TestFencedLeftOutOnlyWhenDropped(t *testing.T) {
	self, peer := handover.NewMemberID("self", "1"), handover.NewMemberID("peer", "1")
	c, fenced := leftOutBy(self, peer, []handover.NodeID{self.Node(), peer.Node()})
	if fenced == nil || !fenced.LeftOut {
		t.Fatalf("left out of a peer's view: fenced %+v, want LeftOut: %+v", fenced, c.Status())
	}

	c = joined(t, self, peer, 4)
	f, ok := find[*handover.Fenced](c.Step(&handover.LeaseRenewFailed{Seq: 1, Lost: true}))
	if !ok || f.LeftOut {
		t.Fatalf("lease revoked: fenced %+v (%v), want not LeftOut", f, ok)
	}
}

// A member left out of the view of a lease holder that is not in its
// cluster topology is fenced with a reason that names the likely cause:
// two groups of one name, on two clusters, with their leases in one
// namespace. One left out by a current peer is not told so.
func TestLeftOutByAMemberKnownOnlyByItsLease(t *testing.T) {
	self, peer := handover.NewMemberID("self", "1"), handover.NewMemberID("peer", "1")
	for _, inTopology := range []bool{false, true} {
		nodes := []handover.NodeID{self.Node()}
		if inTopology {
			nodes = append(nodes, peer.Node())
		}
		c, fenced := leftOutBy(self, peer, nodes)
		if fenced == nil || !strings.Contains(fenced.Reason, "left this one out of its view") {
			t.Fatalf("peer in the topology %v: fenced %+v, want left out: %+v", inTopology, fenced, c.Status())
		}
		if hint := strings.Contains(fenced.Reason, "two groups share this group's name and lease namespace"); hint == inTopology {
			t.Errorf("peer in the topology %v: reason %q", inTopology, fenced.Reason)
		}
	}
}

// leftOutBy returns a core of self, with the topology nodes and self's and
// peer's leases, that heard peer's Hellos leave it out of peer's view for
// up to 20 ticks (HealTicks 3), and what it was fenced with (nil if not).
func leftOutBy(self, peer handover.MemberID, nodes []handover.NodeID) (*handover.Core, *handover.Fenced) {
	cfg := testConfig(self, 4)
	cfg.HealTicks = 3
	c := handover.NewCore(cfg)
	c.Step(&handover.Topology{Nodes: nodes})
	c.Step(&handover.LeaseRenewed{Seq: 1, Start: 0, Token: 10})
	c.Step(&handover.Leases{Leases: []handover.LeaseRecord{{Holder: self, Version: "10"}, {Holder: peer, Version: "11"}}})
	var fenced *handover.Fenced
	for i := 0; i < 20 && fenced == nil; i++ {
		c.Step(&handover.Hello{From: peer, Ranges: 4, HashField: "uid", View: []handover.MemberID{peer}, Reply: true})
		fenced, _ = find[*handover.Fenced](c.Step(&handover.Tick{Now: simTick}))
	}
	return c, fenced
}

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
