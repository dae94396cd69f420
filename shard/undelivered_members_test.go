//go:build !race

// Two protoactor cluster members in one process: not under -race (see
// cluster_test.go).

package shard_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// Two members that deliver the group between them each say no range is
// undelivered: each counts the ranges its peer's Hellos name. Once one is
// killed, the other names the ranges nobody delivers until it has taken
// them over.
func TestMembersSeeUndeliveredRanges(t *testing.T) {
	src := newMemServer()
	for i := range 40 {
		src.create(fmt.Sprintf("o%d", i))
	}
	g := newGroup(t, src)
	defer g.stopAll()
	m1, m2 := g.join(), g.join()
	for _, m := range []*member{m1, m2} {
		if !cache.WaitForCacheSync(timeoutCh(30*time.Second), m.inf.HasSynced) {
			t.Fatalf("%s did not sync", m.name)
		}
	}
	eventually(t, 30*time.Second, "two members settled", g.settled)
	eventually(t, 10*time.Second, "no range undelivered", func() string {
		for _, m := range []*member{m1, m2} {
			if u := m.inf.Status().Undelivered; u == nil || len(u) != 0 {
				return fmt.Sprintf("%s: Undelivered %v, want none", m.name, u)
			}
		}
		return ""
	})
	killed := len(m2.inf.Ranges())
	g.kill(m2)
	eventually(t, 30*time.Second, "the killed member's ranges undelivered", func() string {
		if u := m1.inf.Status().Undelivered; len(u) != killed {
			return fmt.Sprintf("Undelivered %v, want the %d ranges of the killed member", u, killed)
		}
		return ""
	})
	eventually(t, 30*time.Second, "no range undelivered once taken over", func() string {
		if u := m1.inf.Status().Undelivered; u == nil || len(u) != 0 {
			return fmt.Sprintf("Undelivered %v, want none", u)
		}
		return ""
	})
}
