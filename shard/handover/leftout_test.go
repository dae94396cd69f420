package handover_test

import (
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
