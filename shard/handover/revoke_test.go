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
