package shard

import (
	"context"
	"errors"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	corev1 "k8s.io/api/core/v1"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A copy from a member that does not answer (frozen) ends once that
// member's lease is released, not after its chunk's timeout; copies from
// other members go on.
func TestCopyEndsWhenItsSourceIsReleased(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	asked := make(chan struct{}, 1)
	if _, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(interface{ GetChunk() int32 }); ok {
			asked <- struct{}{} // and never answers
		}
	}), actorName("g")); err != nil {
		t.Fatal(err)
	}
	inc := &incarnation{s: &Informer{group: "g", example: &corev1.ConfigMap{}}, c: &cluster.Cluster{ActorSystem: sys}, id: "self"}
	fetch := func(from handover.MemberID) chan error {
		out := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			defer inc.copies.add(from, cancel)()
			_, err := inc.fetchSnapshot(ctx, from, sys.Address(), 0, 1)
			out <- err
		}()
		<-asked
		return out
	}
	frozen, other := fetch("frozen"), fetch("other")
	inc.copies.released([]handover.MemberID{"someone-else"})
	inc.copies.released([]handover.MemberID{"frozen"})
	if err := <-frozen; !errors.Is(err, errSourceReleased) {
		t.Fatalf("the copy from the released member ended with %v, want %v", err, errSourceReleased)
	}
	select {
	case err := <-other:
		t.Fatalf("the copy from a member still holding its lease ended: %v", err)
	default:
	}
	inc.copies.released([]handover.MemberID{"other"})
	if err := <-other; !errors.Is(err, errSourceReleased) {
		t.Fatalf("the second copy ended with %v", err)
	}
	inc.copies.mu.Lock()
	defer inc.copies.mu.Unlock()
	if len(inc.copies.m) != 0 {
		t.Fatalf("copies still recorded: %v", inc.copies.m)
	}
}
