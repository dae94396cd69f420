//go:build !race

// Two protoactor cluster members in one process: not under -race (see
// cluster_test.go).

package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard"
)

// A range handed over make-before-break goes undelivered only from the
// old deliverer's handoff to the new one's delivery, not while the new one
// lists it: the new owner's unserved time is below its acquisition's
// duration.
func TestMembersHandoffUnservedTime(t *testing.T) {
	src := newMemServer()
	for i := range 200 {
		src.create(fmt.Sprintf("o%d", i))
	}
	g := newGroup(t, src, shard.WithRanges(8))
	defer g.stopAll()
	g.join()
	eventually(t, 30*time.Second, "m1 settled alone", g.settled)
	m2 := g.join()
	eventually(t, 60*time.Second, "two members settled", g.settled)
	handed := 0
	for _, h := range m2.inf.Status().Handovers {
		if h.Kind != "acquire" {
			continue
		}
		if h.From == "" {
			t.Errorf("range %v came to m2 without a handoff", h.Range)
			continue
		}
		handed++
		if h.Unserved <= 0 || h.Unserved >= h.Duration {
			t.Errorf("range %v handed over: unserved %v, took %v; want 0 < unserved < took", h.Range, h.Unserved, h.Duration)
		}
		t.Logf("range %v: listed and handed over in %v, unserved %v", h.Range, h.Duration, h.Unserved)
	}
	if handed == 0 {
		t.Fatal("m2 acquired no range")
	}
}
