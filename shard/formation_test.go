//go:build !race

// Several protoactor cluster members in one process: not under -race (see
// cluster_test.go).

package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard"
)

// TestMembersJoiningInTurnListEachRangeOnce: members that join one after
// another, within a lease duration of the first, list each range once. A
// member lists a range that no member delivers only once it may ask for it
// (a lease duration after its first lease snapshot): listed at once, the
// ranges the second and third members take from the first would be listed
// twice, since the first delivers none of them yet and has none to hand on.
func TestMembersJoiningInTurnListEachRangeOnce(t *testing.T) {
	src := newMemServer()
	for i := range 300 {
		src.create(fmt.Sprintf("o%d", i))
	}
	// A lease duration several times a join (about a second here), so that
	// all three join before the first may ask.
	g := newGroup(t, src, shard.WithLeaseTimings(8*time.Second, 6*time.Second, 300*time.Millisecond))
	defer g.stopAll()
	start := time.Now()
	for range 3 {
		g.join()
	}
	if joined := time.Since(start); joined > 6*time.Second {
		t.Skipf("the members took %v to join, too close to the lease duration for the test to show anything", joined)
	}
	eventually(t, 60*time.Second, "the group settled", g.settled)
	if n := src.lists.Load(); n != 16 {
		t.Fatalf("the group listed %d times for 16 ranges", n)
	}
	if errs := g.rec.exclusive(); len(errs) > 0 {
		t.Fatal(errs)
	}
}
