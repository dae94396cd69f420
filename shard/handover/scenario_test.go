package handover_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/stage"
)

// settle delivers everything and checks promise 2.
func settle(t *testing.T, w *world) {
	t.Helper()
	if !w.quiesce(rand.New(rand.NewPCG(7, 7))) && len(w.errs) == 0 {
		w.failf("no quiescence:\n%s", w.dump())
	}
	if len(w.errs) == 0 {
		w.checkQuiet()
	}
	if len(w.errs) > 0 {
		t.Fatalf("%s\nscript: %s", strings.Join(w.errs, "\n"), w.script())
	}
}

func delivered(w *world, id string) int {
	n := 0
	for _, d := range w.members[handover.MemberID(id)].delivering {
		if d {
			n++
		}
	}
	return n
}

func TestJoinHandsOverFromTheOwner(t *testing.T) {
	w := newWorld(t, 16)
	w.fifo = true
	w.exec("start m1")
	settle(t, w)
	if n := delivered(w, "m1"); n != 16 {
		t.Fatalf("m1 delivers %d ranges, want 16", n)
	}
	w.moves = nil
	w.exec("start m2")
	settle(t, w)
	n1, n2 := delivered(w, "m1"), delivered(w, "m2")
	if n1+n2 != 16 || n2 == 0 || n1 == 0 {
		t.Fatalf("m1 %d, m2 %d ranges", n1, n2)
	}
	if len(w.moves) != n2 {
		t.Fatalf("%d moves for %d ranges: %v", len(w.moves), n2, w.moves)
	}
	for _, mv := range w.moves {
		if mv.from != "m1" || mv.to != "m2" {
			t.Errorf("range %d moved from %q to %q, want m1 to m2", mv.r, mv.from, mv.to)
		}
	}
}

func TestLeaveHandsOverAndSaysGoodbye(t *testing.T) {
	w := newWorld(t, 16)
	w.fifo = true
	w.exec("start m1")
	w.exec("start m2")
	w.exec("start m3")
	settle(t, w)
	before := delivered(w, "m2")
	w.moves = nil
	w.exec("leave m2")
	settle(t, w)
	if !w.members["m2"].left {
		t.Fatal("m2 did not leave")
	}
	// m2's ranges move, each handed over by m2; a few others may move
	// between the two that stay, to keep their shares even, also handed
	// over by their former owner.
	fromM2 := 0
	for _, mv := range w.moves {
		switch mv.from {
		case "m2":
			fromM2++
		case "m1", "m3":
		default:
			t.Errorf("range %d moved from %q, want a handover by its owner", mv.r, mv.from)
		}
	}
	if fromM2 != before {
		t.Fatalf("%d ranges moved from m2, want the %d it delivered: %v", fromM2, before, w.moves)
	}
}

func TestKillIsTakenOverWithoutAnAnswer(t *testing.T) {
	w := newWorld(t, 16)
	w.fifo = true
	w.exec("start m1")
	w.exec("start m2")
	settle(t, w)
	lost := delivered(w, "m2")
	w.moves = nil
	w.exec("kill m2")
	w.exec("expire m2")
	settle(t, w)
	if n := delivered(w, "m1"); n != 16 {
		t.Fatalf("m1 delivers %d ranges, want 16", n)
	}
	if len(w.moves) != lost {
		t.Fatalf("%d moves, want %d", len(w.moves), lost)
	}
	for _, mv := range w.moves {
		if mv.from != "" {
			t.Errorf("range %d: from %q, want none (m2 was killed)", mv.r, mv.from)
		}
	}
}

func TestLastMemberLeavesWithNobodyToHandTo(t *testing.T) {
	w := newWorld(t, 4)
	w.fifo = true
	w.exec("start m1")
	settle(t, w)
	w.exec("leave m1")
	settle(t, w)
	if !w.members["m1"].left || delivered(w, "m1") != 0 {
		t.Fatalf("left=%v delivering=%d", w.members["m1"].left, delivered(w, "m1"))
	}
}

func TestMemberWithOtherSettingsGivesUp(t *testing.T) {
	for _, other := range []string{"start m2 8 uid", "start m2 16 namespace"} {
		w := newWorld(t, 16)
		w.fifo = true
		w.exec("start m1")
		settle(t, w)
		w.moves = nil
		w.exec(other)
		settle(t, w)
		m2 := w.members["m2"]
		if m2.failed == "" || !strings.Contains(m2.failed, "m1") {
			t.Errorf("%s: m2 failed with %q, want a reason naming m1", other, m2.failed)
		}
		if n := delivered(w, "m1"); n != 16 || len(w.moves) != 0 {
			t.Errorf("%s: m1 delivers %d ranges after %d moves, want 16 and none", other, n, len(w.moves))
		}
	}
}

// An Acquire older than one already seen from the same member, for the same
// range, is ignored; an answer to another epoch does not count.
func TestOlderEpochsAreIgnored(t *testing.T) {
	// The asker must own range 0: pick its name so.
	var asker handover.MemberID
	for i := 0; asker == ""; i++ {
		if id := handover.MemberID(fmt.Sprintf("m%d", i)); id != "m1" && handover.Assign([]handover.MemberID{"m1", id}, 1)[0] == id {
			asker = id
		}
	}
	c := handover.NewCore(handover.Config{Self: "m1", Ranges: 1, HashField: "uid", DiscoveryTicks: 1})
	c.Step(&handover.Topology{Members: []handover.MemberID{"m1", asker}})
	c.Step(&handover.Hello{From: asker, Ranges: 1, HashField: "uid", Reply: true})
	out := c.Step(&handover.Acquire{From: asker, Epoch: 5, Ranges: []int{0}})
	if !hasReleased(out, 5) {
		t.Fatalf("epoch 5 not answered: %v", out)
	}
	if out := c.Step(&handover.Acquire{From: asker, Epoch: 3, Ranges: []int{0}}); hasReleased(out, 3) {
		t.Fatalf("older epoch 3 answered: %v", out)
	}
}

func hasReleased(out []stage.Msg, epoch uint64) bool {
	for _, m := range out {
		if r, ok := m.Body.(*handover.Released); ok && r.Epoch == epoch {
			return true
		}
	}
	return false
}

// A member that cannot be reached (a partition: its messages are lost, and
// the provider keeps it) stalls the handovers to a joining member, which
// needs its answer. The ranges' deliverers are asked last, so they keep
// delivering meanwhile: no range goes unserved.
func TestUnreachableMemberLeavesNoRangeUnserved(t *testing.T) {
	w := newWorld(t, 16)
	w.fifo = true
	w.exec("start m1")
	w.exec("start m2")
	w.exec("start m3")
	settle(t, w)
	w.exec("cut m3")
	w.exec("start m4")
	rng := rand.New(rand.NewPCG(3, 3))
	for round := range 60 {
		for len(w.net) > 0 || len(w.effects) > 0 || w.anyLocal() {
			w.exec(w.random(rng, false))
		}
		for _, id := range w.runningMembers() {
			w.exec("tick " + string(id))
		}
		for r := range w.ranges {
			served := false
			for _, id := range w.order {
				if m := w.members[id]; m.alive && m.delivering[r] {
					served = true
				}
			}
			if !served {
				t.Fatalf("round %d: range %d is served by nobody while m3 is cut off\n%s", round, r, w.dump())
			}
		}
		if len(w.errs) > 0 {
			t.Fatal(strings.Join(w.errs, "\n"))
		}
	}
	w.exec("heal m3")
	settle(t, w)
	if delivered(w, "m4") == 0 {
		t.Fatal("m4 serves no range once m3 is reachable again")
	}
}

// Shares differ by one range at most, whatever the members.
func TestAssignIsBalanced(t *testing.T) {
	for seed := range 200 {
		n := 1 + seed%40
		var ms []handover.MemberID
		for i := range 1 + seed%7 {
			ms = append(ms, handover.MemberID(fmt.Sprintf("member-%d-%d", seed, i)))
		}
		count := map[handover.MemberID]int{}
		for r, o := range handover.Assign(ms, n) {
			if o == "" {
				t.Fatalf("seed %d: range %d has no owner", seed, r)
			}
			count[o]++
		}
		lo, hi := n, 0
		for _, m := range ms {
			lo, hi = min(lo, count[m]), max(hi, count[m])
		}
		if hi-lo > 1 {
			t.Fatalf("seed %d: %d ranges over %d members: shares from %d to %d", seed, n, len(ms), lo, hi)
		}
		rev := slices.Clone(ms)
		slices.Reverse(rev)
		if !slices.Equal(handover.Assign(rev, n), handover.Assign(ms, n)) {
			t.Fatalf("seed %d: the order of members changes the owners", seed)
		}
	}
}
