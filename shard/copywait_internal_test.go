package shard

import (
	"context"
	"errors"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	corev1 "k8s.io/api/core/v1"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
)

// silentSource is an incarnation whose copies come from a member that
// never answers (frozen), and the start of a copy from it as a given
// member: it returns once the member was asked, with the copy's end.
func silentSource(t *testing.T) (*incarnation, func(from handover.MemberID) chan error) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	asked := make(chan struct{}, 1)
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*shardpb.SnapshotRequest); ok {
			asked <- struct{}{} // and never answers
		}
	}), actorName("g")); err != nil {
		t.Fatal(err)
	}
	inc := &incarnation{s: &Informer{shared: &shared{group: "g"}, example: &corev1.ConfigMap{}}, c: &cluster.Cluster{ActorSystem: sys}, id: "self"}
	return inc, func(from handover.MemberID) chan error {
		out := make(chan error, 1)
		go func() {
			_, err := inc.fetchSnapshot(context.Background(), inc.s, from, sys.Address(), 0, 1)
			out <- err
		}()
		<-asked
		return out
	}
}

// waits reports whether a copy from member from is under way.
func (w *copyWaits) waits(from handover.MemberID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[from]
	return ok
}

// A copy from a member that does not answer (frozen) ends once that
// member's lease is released, not after its chunk's timeout; copies from
// other members go on.
func TestCopyEndsWhenItsSourceIsReleased(t *testing.T) {
	inc, fetch := silentSource(t)
	frozen, other := fetch("frozen"), fetch("other")
	inc.copies.leases(&handover.Leases{Released: []handover.MemberID{"someone-else"}})
	inc.copies.leases(&handover.Leases{Released: []handover.MemberID{"frozen"}})
	if err := <-frozen; !errors.Is(err, errSourceReleased) {
		t.Fatalf("the copy from the released member ended with %v, want %v", err, errSourceReleased)
	}
	if !inc.copies.waits("other") {
		t.Fatal("the copy from a member still holding its lease ended")
	}
	inc.copies.leases(&handover.Leases{Released: []handover.MemberID{"other"}})
	if err := <-other; !errors.Is(err, errSourceReleased) {
		t.Fatalf("the second copy ended with %v", err)
	}
	inc.copies.mu.Lock()
	defer inc.copies.mu.Unlock()
	if len(inc.copies.m) != 0 {
		t.Fatalf("copies still recorded: %v", inc.copies.m)
	}
}

// A copy redirected to the member the range went to ends with that
// member's lease, not the first one's.
func TestRedirectedCopyEndsWithItsNewSource(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	asked := make(chan struct{}, 2)
	n := 0
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*shardpb.SnapshotRequest); ok {
			n++
			if n == 1 {
				ctx.Respond(&shardpb.SnapshotChunk{Error: "released", MovedTo: "second", MovedToAddress: sys.Address()})
			}
			asked <- struct{}{} // the second ask is never answered
		}
	}), actorName("g")); err != nil {
		t.Fatal(err)
	}
	inc := &incarnation{s: &Informer{shared: &shared{group: "g"}, example: &corev1.ConfigMap{}}, c: &cluster.Cluster{ActorSystem: sys}, id: "self"}
	out := make(chan error, 1)
	go func() {
		_, err := inc.fetchSnapshot(context.Background(), inc.s, "first", sys.Address(), 0, 1)
		out <- err
	}()
	<-asked
	<-asked
	first, second := inc.copies.waits("first"), inc.copies.waits("second")
	if first || !second {
		t.Fatalf("the redirected copy is recorded as from the first member (%v) or not from the second (%v)", first, second)
	}
	inc.copies.leases(&handover.Leases{Released: []handover.MemberID{"second"}})
	if err := <-out; !errors.Is(err, errSourceReleased) {
		t.Fatalf("the redirected copy ended with %v, want %v", err, errSourceReleased)
	}
}

// A copy from a member whose lease was in the last snapshot and is in no
// longer (deleted, or a tombstone took its name) ends at once; a copy from
// a member no snapshot has shown yet (a watch behind its lease) goes on.
func TestCopyEndsWhenItsSourcesLeaseIsDeleted(t *testing.T) {
	inc, fetch := silentSource(t)
	held := func(ids ...handover.MemberID) *handover.Leases {
		snap := &handover.Leases{}
		for _, id := range ids {
			snap.Leases = append(snap.Leases, handover.LeaseRecord{Holder: id, Version: "1"})
		}
		return snap
	}
	frozen, unseen := fetch("frozen"), fetch("unseen")
	// The first snapshot: no member lost a lease it was seen holding.
	inc.copies.leases(held("self"))
	inc.copies.leases(held("self", "frozen"))
	if !inc.copies.waits("frozen") || !inc.copies.waits("unseen") {
		t.Fatal("a copy ended while no lease it comes from was seen deleted")
	}
	inc.copies.leases(held("self"))
	if err := <-frozen; !errors.Is(err, errSourceDeleted) {
		t.Fatalf("the copy from the member whose lease was deleted ended with %v, want %v", err, errSourceDeleted)
	}
	if !inc.copies.waits("unseen") {
		t.Fatal("the copy from a member no snapshot showed ended")
	}
	inc.copies.leases(held("self", "unseen"))
	inc.copies.leases(&handover.Leases{Leases: held("self").Leases, Released: []handover.MemberID{"unseen"}})
	if err := <-unseen; !errors.Is(err, errSourceReleased) {
		t.Fatalf("a copy from a member whose lease was released ended with %v, want %v", err, errSourceReleased)
	}
}
