//go:build !race

// Several protoactor cluster members in one process: not under -race (see
// cluster_test.go).

package shard_test

import (
	"fmt"
	"testing"
	"time"
)

// TestMembersStartedTogetherListEachRangeOnce: members started together
// list each range once: each waits for the others' answers (discovery)
// and for its lease watch to show its lease before it lists a range no
// member delivers, and lists only its own. (With neither wait, 38 and 50
// lists in two runs.) A member that
// joins later takes its ranges from their deliverers' caches; one that
// joins while the ranges it takes are still being listed elsewhere lists
// them too (a range no member delivers yet has none to copy from).
func TestMembersStartedTogetherListEachRangeOnce(t *testing.T) {
	src := newMemServer()
	for i := range 300 {
		src.create(fmt.Sprintf("o%d", i))
	}
	g := newGroup(t, src)
	defer g.stopAll()
	g.joinMany(3)
	eventually(t, 60*time.Second, "the group settled", g.settled)
	if n := src.lists.Load(); n != 16 {
		t.Fatalf("the group listed %d times for 16 ranges", n)
	}
	if errs := g.rec.exclusive(); len(errs) > 0 {
		t.Fatal(errs)
	}
}
