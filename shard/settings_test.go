//go:build !race

// Several cluster members in one process: see cluster_test.go.

package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/actorinformer/actorinformer/shard"
)

// Two members with different range counts that start together (neither
// sees the other's settings at New): neither gives up; one serves the
// group, the other waits, saying why, live, and joins once the first has
// left.
func TestMembersRacingWithOtherSettingsConverge(t *testing.T) {
	src := newMemServer()
	for i := range 60 {
		src.create(fmt.Sprintf("o%d", i))
	}
	agent := test.NewInMemAgent()
	// A cluster member that runs no group: in the cluster's topology, not
	// in the group's view.
	bare, bareProv := startCluster(agent)
	defer stopCluster(bare, bareProv)
	leases := testLeases()
	var ms []*running
	for _, ranges := range []int{16, 8} {
		ms = append(ms, newMember(t, agent, src, append(leases, shard.WithRanges(ranges))...))
	}
	for _, m := range ms {
		if w := m.inf.Waiting(); w != "" {
			t.Fatalf("waiting after New, before any member ran: %s", w)
		}
	}
	for _, m := range ms {
		m.run()
	}
	var serving, waiting *running
	eventually(t, 30*time.Second, "one member serving, the other waiting", func() string {
		serving, waiting = nil, nil
		for _, m := range ms {
			select {
			case <-m.done:
				return fmt.Sprintf("%s's Run returned: %s", m.inf.Member(), m.inf.Err())
			default:
			}
			switch {
			case m.inf.Waiting() != "":
				waiting = m
			case m.inf.CheckSynced(nil) == nil:
				serving = m
			}
		}
		if serving == nil || waiting == nil {
			return "not yet"
		}
		return ""
	})
	for _, m := range ms {
		if err := m.inf.CheckLive(nil); err != nil {
			t.Errorf("%s: CheckLive %v", m.inf.Member(), err)
		}
	}
	// The status counts the group's members, not the cluster's three.
	if view := serving.inf.Status().View; len(view) != 1 || view[0] != serving.inf.Member() {
		t.Errorf("the serving member's view: %v; want itself only", view)
	}
	want := len(waiting.inf.Status().Ranges)
	if want == 0 {
		want = 16 + 8 - len(serving.inf.Ranges())
	}
	serving.cancel()
	<-serving.done
	_ = serving.prov.Shutdown(true)
	eventually(t, 30*time.Second, "the waiting member serving every range of its own", func() string {
		if w := waiting.inf.Waiting(); w != "" {
			return "still waiting: " + w
		}
		if err := waiting.inf.CheckSynced(nil); err != nil {
			return err.Error()
		}
		if n := len(waiting.inf.GetIndexer().ListKeys()); n != 60 {
			return fmt.Sprintf("%d objects cached", n)
		}
		return ""
	})
	if n := len(waiting.inf.Ranges()); n != want {
		t.Errorf("the member that waited delivers %d ranges, want %d", n, want)
	}
}

// With WithRejoin, a member that its provider dropped rejoins on a new
// cluster member; if that cannot be made, it gives up and CheckLive fails.
// (Two cluster members at once: not with -race.)
func TestMemberWithRejoinRejoinsWhenDropped(t *testing.T) {
	agent := test.NewInMemAgent()
	src := newMemServer()
	for i := range 30 {
		src.create(fmt.Sprintf("o%d", i))
	}
	var next atomic.Pointer[test.Provider]
	r := runMember(t, agent, src, shard.WithRejoin(func(context.Context) (*cluster.Cluster, error) {
		c, prov := startCluster(agent)
		next.Store(prov)
		return c, nil
	}))
	defer func() {
		if p := next.Load(); p != nil {
			_ = p.Shutdown(true)
		}
	}()
	eventually(t, 30*time.Second, "synced", func() string { return errString(r.inf.CheckSynced(nil)) })
	first := r.inf.Member()
	agent.DeregisterService(r.c.ActorSystem.ID)
	eventually(t, 30*time.Second, "synced again on a new cluster member", func() string {
		if r.inf.Cluster() == r.c {
			return "still on the first cluster member"
		}
		return errString(r.inf.CheckSynced(nil))
	})
	if st := r.inf.Status(); st.Rejoins != 1 || st.Member == first || len(st.Delivered) != 16 {
		t.Errorf("after the rejoin: %d rejoins, member %s (was %s), %d ranges; want 1, a new id, 16", st.Rejoins, st.Member, first, len(st.Delivered))
	}
	if err := r.inf.CheckLive(nil); err != nil {
		t.Errorf("CheckLive after the rejoin: %v", err)
	}

	failing := runMember(t, agent, newMemServer(), shard.WithRejoin(func(context.Context) (*cluster.Cluster, error) {
		return nil, errors.New("no more cluster members")
	}))
	eventually(t, 30*time.Second, "in a group of two", func() string {
		if len(failing.inf.Status().View) != 2 {
			return "not yet"
		}
		return ""
	})
	agent.DeregisterService(failing.c.ActorSystem.ID)
	select {
	case <-failing.done:
	case <-time.After(45 * time.Second): // the rejoin is tried for about 31 s
		t.Fatalf("Run did not return after its rejoin failed: %+v", failing.inf.Status())
	}
	if err := failing.inf.CheckLive(nil); err == nil || !strings.Contains(err.Error(), "no more cluster members") {
		t.Errorf("CheckLive after a failed rejoin: %v", err)
	}
}
