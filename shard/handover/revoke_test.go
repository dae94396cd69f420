package handover_test

import (
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A revocation that fails (the lease changed: renewed, or deleted and its
// name taken by a tombstone) makes the member read the lease again; a
// tombstone then makes it void. Retrying the revocation with the old
// version would fail forever, and the member's asks would wait forever for
// a member that is gone.
func TestFailedRevocationReadsTheLeaseAgain(t *testing.T) {
	self, other := handover.NewMemberID("a", "1"), handover.NewMemberID("b", "2")
	c := handover.NewCore(handover.Config{Self: self, Ranges: 2, HashField: "uid",
		LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod})
	c.Step(&handover.Topology{Nodes: []handover.NodeID{"a"}})
	c.Step(&handover.LeaseChecked{Member: other, Found: true, Version: "7"})
	now := time.Duration(0)
	tick := func() []any {
		now += 100 * time.Millisecond
		var out []any
		for _, m := range c.Step(&handover.Tick{Now: now}) {
			out = append(out, m.Body)
		}
		return out
	}
	revoked := false
	for now < 3*simLeaseDuration && !revoked {
		for _, b := range tick() {
			if r, ok := b.(*handover.RevokeLease); ok && r.Member == other && r.Version == "7" {
				revoked = true
			}
		}
	}
	if !revoked {
		t.Fatal("the lease, unchanged for its duration, was not revoked")
	}
	checks := false
	for _, m := range c.Step(&handover.LeaseRevoked{Member: other, Version: "7", OK: false}) {
		if r, ok := m.Body.(*handover.CheckLease); ok && r.Member == other {
			checks = true
		}
	}
	if !checks {
		t.Fatal("a failed revocation did not read the lease again")
	}
	c.Step(&handover.LeaseChecked{Member: other, Found: false})
	for range 3 * int(simLeaseDuration/(100*time.Millisecond)) {
		for _, b := range tick() {
			if r, ok := b.(*handover.RevokeLease); ok && r.Member == other {
				t.Fatalf("revokes %s's lease again after a tombstone took its name: %+v", other, r)
			}
		}
	}
}

// A member whose first lease write landed with its answer lost (a snapshot
// shows the lease) claims a range; its lease is then revoked (it seemed
// gone), and its next create makes a new one. The claim rests on the
// deleted lease, whose revoker may deliver the range now: the member is
// fenced, and activates nothing. TestRandom seed 137270: both delivered.
func TestCreateAfterTheLeaseWasDeletedFences(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token uint64 // of the create that succeeds
		fence bool
	}{
		{"a new lease", 36, true},
		{"the lease the snapshot showed", 22, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := handover.NewMemberID("peer", "1")
			self := ownerOfZero(peer)
			// The first write (a create) landed, its answer lost.
			c, out := joinedAfter(self, peer, 1, &handover.LeaseRenewFailed{Seq: 1},
				handover.LeaseRecord{Holder: self, Version: "22"}, handover.LeaseRecord{Holder: peer, Version: "21"})
			step := func(in handover.Input) { out = append(out, c.Step(in)...) }
			w, ok := find[*handover.RenewLease](out)
			if !ok || !w.Create || w.Seq != 1 {
				t.Fatalf("no create of the lease at start: %v", out)
			}
			st := c.Status().Ranges[0]
			out = out[:0]
			step(&handover.RangeSynced{Range: 0, Epoch: st.Epoch})
			ask, ok := find[*handover.Acquire](out)
			if !ok {
				t.Fatalf("no ask: %+v", c.Status())
			}
			out = out[:0]
			step(&handover.Released{From: peer, Epoch: ask.Epoch, Ranges: []int{0}})
			step(&handover.Tick{Now: 3 * simTick})
			if st := c.Status().Ranges[0]; st.State != "claiming" {
				t.Fatalf("range 0 is %s, want claiming", st.State)
			}
			w, ok = find[*handover.RenewLease](out)
			if !ok || !w.Create {
				t.Fatalf("no create for the claim: %v", out)
			}
			out = out[:0]
			step(&handover.LeaseRenewed{Seq: w.Seq, Start: 3 * simTick, Token: tc.token})
			_, activated := find[*handover.ActivateRange](out)
			_, fenced := find[*handover.Fenced](out)
			if fenced != tc.fence || activated == tc.fence {
				t.Fatalf("fenced %v, activated %v; want fenced %v (%s)", fenced, activated, tc.fence, c.Status().Fenced)
			}
		})
	}
}
