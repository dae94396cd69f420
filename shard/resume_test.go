//go:build !race

package shard_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard"
)

// A member that crashes takes no handoff with it: the members that take
// its ranges over resume from the positions its lease renewals carried,
// and their handlers get OnDelete for the objects deleted since, which the
// crashed member's handlers may have had. For every key gone from the
// server that some handler was given, the last handler call on it, across
// members, is a delete.
func TestCrashTakeoverDeliversTheDeletesSinceThePosition(t *testing.T) {
	src := newMemServer()
	src.filter = true
	for i := range 300 {
		src.create(fmt.Sprintf("o%d", i))
	}
	g := newGroup(t, src)
	defer g.stopAll()
	g.joinMany(3)
	eventually(t, 30*time.Second, "three members settled", g.settled)
	victim := g.members()[0]
	// The killed member's positions reach its lease with its renewals.
	eventually(t, 10*time.Second, "the member to kill has its positions on its lease", func() string { return g.positioned(victim) })
	var owned []string
	for _, k := range src.keys() {
		if victim.view.holds(k) {
			owned = append(owned, k)
		}
	}
	if len(owned) < 20 {
		t.Fatalf("the member to kill holds %d objects; want at least 20", len(owned))
	}
	slices.Sort(owned)
	rng := rand.New(rand.NewPCG(5, 5))
	rng.Shuffle(len(owned), func(i, j int) { owned[i], owned[j] = owned[j], owned[i] })
	g.kill(victim)
	// Deleted while no member delivers them: before the victim's lease is
	// void, and while its ranges are listed.
	for _, k := range owned[:20] {
		src.remove(k)
	}
	eventually(t, 30*time.Second, "two members settled after the kill", g.settled)

	resumes := int64(0)
	for _, m := range g.members() {
		st := m.inf.Status()
		resumes += st.Resumes
		if st.ResumeGaps != 0 {
			t.Errorf("%s: %d resumes fell short", m.name, st.ResumeGaps)
		}
	}
	if resumes == 0 {
		t.Errorf("no range resumed from a position")
	}
	last := lastCalls(g)
	server := src.snapshot()
	for _, k := range owned[:20] {
		if _, live := server[k]; live {
			t.Fatalf("%s is still on the server", k)
		}
		if c := last[k]; c.op != "delete" {
			t.Errorf("%s was deleted while its range had no deliverer; the last handler call on it was %s's %s", k, c.member, c.op)
		}
	}
}

// Every member stopped at once: nobody is left to take a handoff, so no
// leaver waits out its leave timeout (30 s) for one; the ranges' final
// positions stay on the leases, from which the next owners resume.
func TestEveryMemberStoppedAtOnce(t *testing.T) {
	src := newMemServer()
	src.filter = true
	for i := range 200 {
		src.create(fmt.Sprintf("o%d", i))
	}
	g := newGroup(t, src)
	g.joinMany(3)
	eventually(t, 30*time.Second, "three members settled", g.settled)
	g.join()
	eventually(t, 30*time.Second, "four members settled", g.settled)
	ms := g.members()
	start := time.Now()
	took := make([]time.Duration, len(ms))
	for _, m := range ms {
		m.cancel()
	}
	for i, m := range ms {
		select {
		case <-m.done:
			took[i] = time.Since(start)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop within 60 s", m.name)
		}
	}
	for _, m := range ms {
		g.remove(m)
		stopCluster(m.c, m.prov)
	}
	t.Logf("each member's Run returned after %v", took)
	for i, d := range took {
		// Far below the leave timeout a leaver waited out before.
		if d >= shard.DefaultLeaveTimeout/2 {
			t.Errorf("%s's Run returned after %v: it waited for an owner that could not come", ms[i].name, d)
		}
	}
}
