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
// lists in two runs.) A member that joins later takes its ranges from
// their deliverers' caches.
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

// TestMembersStartedOneAfterAnotherListEachRangeOnce: a member that
// starts alone lists every range; members that join while its lists are
// under way (each takes 2 s) leave those ranges with it until it delivers
// them, then take their share as copies of its cache. (Before the Hellos
// said which ranges a member lists, the joiners listed the ranges
// placement gave them again.)
func TestMembersStartedOneAfterAnotherListEachRangeOnce(t *testing.T) {
	src := newMemServer()
	for i := range 300 {
		src.create(fmt.Sprintf("o%d", i))
	}
	src.listDelay.Store(int64(2 * time.Second))
	g := newGroup(t, src)
	defer g.stopAll()
	g.join()
	eventually(t, 30*time.Second, "the first member listing every range", func() string {
		if n := src.lists.Load(); n < 16 {
			return fmt.Sprintf("%d lists", n)
		}
		return ""
	})
	g.join()
	g.join()
	eventually(t, 60*time.Second, "the group settled", g.settled)
	if n := src.lists.Load(); n != 16 {
		t.Fatalf("the group listed %d times for 16 ranges", n)
	}
	if errs := g.rec.exclusive(); len(errs) > 0 {
		t.Fatal(errs)
	}
}
