package handover_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

func ids(prefix string, n int) []handover.MemberID {
	out := make([]handover.MemberID, n)
	for i := range out {
		out[i] = handover.MemberID(fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

func shares(owners []handover.MemberID) map[handover.MemberID]int {
	out := map[handover.MemberID]int{}
	for _, o := range owners {
		out[o]++
	}
	return out
}

func moves(before, after []handover.MemberID) int {
	n := 0
	for r := range before {
		if before[r] != after[r] {
			n++
		}
	}
	return n
}

// Placement keeps shares within one of each other, whatever the holders,
// and every member computes the same owners whatever the order of members.
func TestPlaceIsBalancedAndDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for seed := range 2000 {
		n := 1 + rng.IntN(64)
		ms := ids(fmt.Sprintf("s%d", seed), 1+rng.IntN(9))
		holders := make([]handover.MemberID, n)
		for r := range holders {
			if rng.IntN(4) > 0 {
				holders[r] = ms[rng.IntN(len(ms))]
			} else if rng.IntN(2) == 0 {
				holders[r] = "gone"
			}
		}
		got := handover.Place(ms, holders, nil, n, 0)
		lo, hi := n, 0
		sh := shares(got)
		for _, m := range ms {
			lo, hi = min(lo, sh[m]), max(hi, sh[m])
		}
		if sh[""] > 0 || hi-lo > 1 {
			t.Fatalf("seed %d: %d ranges over %d members: shares %v", seed, n, len(ms), sh)
		}
		rev := slices.Clone(ms)
		slices.Reverse(rev)
		if !slices.Equal(handover.Place(rev, holders, nil, n, 0), got) {
			t.Fatalf("seed %d: the order of members changes the owners", seed)
		}
		// Stable: placing again with the owners as holders changes nothing.
		if again := handover.Place(ms, got, nil, n, 0); !slices.Equal(again, got) {
			t.Fatalf("seed %d: a second placement moves %d ranges", seed, moves(got, again))
		}
	}
}

// A join moves exactly the ranges the newcomer gets; a leave only the
// leaver's; a cap bounds the moves of one placement.
func TestPlaceMovesOnlyWhatItMust(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for seed := range 2000 {
		n := 1 + rng.IntN(64)
		ms := ids(fmt.Sprintf("j%d", seed), 1+rng.IntN(8))
		before := handover.Place(ms, nil, nil, n, 0)
		joined := append(slices.Clone(ms), handover.MemberID(fmt.Sprintf("new-%d", seed)))
		after := handover.Place(joined, before, nil, n, 0)
		if got, want := moves(before, after), shares(after)[joined[len(joined)-1]]; got != want {
			t.Fatalf("seed %d: a join moved %d ranges, the newcomer got %d", seed, got, want)
		}
		if len(ms) > 1 {
			leaver := ms[rng.IntN(len(ms))]
			rest := slices.DeleteFunc(slices.Clone(ms), func(m handover.MemberID) bool { return m == leaver })
			left := handover.Place(rest, before, nil, n, 0)
			if got, want := moves(before, left), shares(before)[leaver]; got != want {
				t.Fatalf("seed %d: a leave moved %d ranges, the leaver had %d", seed, got, want)
			}
		}
		capped := handover.Place(joined, before, nil, n, 2)
		if m := moves(before, capped); m > 2 {
			t.Fatalf("seed %d: %d moves with a cap of 2", seed, m)
		}
	}
}

// Moves over random member sets, sticky placement against rendezvous
// assignment alone (Assign): -v prints them.
func TestPlaceMoveCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	type tally struct{ sticky, plain, max int }
	count := func(name string, n, members int, change func(ms []handover.MemberID, i int) []handover.MemberID) tally {
		var tl tally
		const sets = 5000
		for i := range sets {
			ms := ids(fmt.Sprintf("%s%d-%d", name, i, rng.IntN(1<<30)), members)
			before := handover.Place(ms, nil, nil, n, 0)
			next := change(ms, i)
			s := moves(before, handover.Place(next, before, nil, n, 0))
			tl.sticky += s
			tl.max = max(tl.max, s)
			tl.plain += moves(handover.Assign(ms, n), handover.Assign(next, n))
		}
		t.Logf("%s, %d ranges, %d members: sticky %.2f moves on average (max %d), rendezvous alone %.2f", name, n, members, float64(tl.sticky)/sets, tl.max, float64(tl.plain)/sets)
		return tl
	}
	join := func(ms []handover.MemberID, i int) []handover.MemberID {
		return append(slices.Clone(ms), handover.MemberID(fmt.Sprintf("joiner-%d-%d", i, rng.IntN(1<<30))))
	}
	leave := func(ms []handover.MemberID, i int) []handover.MemberID {
		out := slices.Clone(ms)
		return slices.Delete(out, i%len(out), i%len(out)+1)
	}
	if tl := count("join", 16, 3, join); tl.max > 4 {
		t.Errorf("a join 3→4 of 16 ranges moved up to %d ranges, want at most 4", tl.max)
	}
	count("leave", 16, 3, leave)
	count("join", 64, 8, join)
	// A rolling update of 3: start a new member, stop an old one, three
	// times; each step placed from the last one's owners.
	total, worst := 0, 0
	for i := range 5000 {
		ms := ids(fmt.Sprintf("roll%d-%d", i, rng.IntN(1<<30)), 3)
		owners := handover.Place(ms, nil, nil, 16, 0)
		moved := 0
		for k := range 3 {
			ms = append(ms, handover.MemberID(fmt.Sprintf("v2-%d-%d", i, k)))
			next := handover.Place(ms, owners, nil, 16, 0)
			moved += moves(owners, next)
			owners = next
			ms = ms[1:]
			next = handover.Place(ms, owners, nil, 16, 0)
			moved += moves(owners, next)
			owners = next
		}
		total += moved
		worst = max(worst, moved)
	}
	t.Logf("rolling update of 3 members, 16 ranges: %.2f moves on average (max %d)", float64(total)/5000, worst)
	if worst > 24 {
		t.Errorf("a rolling update moved up to %d ranges, want at most 24", worst)
	}
}

// Members that start together place their ranges with no holder, then
// again as each one's Hellos say which ranges the others deliver: those
// that have started theirs, in any order. No such placement moves a
// range: each member lists only the ranges it keeps, and no range is
// listed twice because another member's first ranges were ready sooner.
func TestPlaceStableWhileMembersStart(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for seed := range 2000 {
		n := 1 + rng.IntN(64)
		ms := ids(fmt.Sprintf("st%d", seed), 1+rng.IntN(9))
		first := handover.Place(ms, nil, nil, n, 0)
		holders := make([]handover.MemberID, n)
		for r := range holders {
			if rng.IntN(2) == 0 {
				holders[r] = first[r]
			}
		}
		if got := handover.Place(ms, holders, nil, n, 1+rng.IntN(4)); !slices.Equal(got, first) {
			t.Fatalf("seed %d: %d ranges over %d members, started %v of %v: the placement moves %d ranges (shares then %v)",
				seed, n, len(ms), shares(holders), shares(first), moves(first, got), shares(got))
		}
	}
}
