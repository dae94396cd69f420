package handover_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// settle delivers everything and checks promise 2.
func settle(t *testing.T, w *world) {
	t.Helper()
	settleWith(t, w, rand.New(rand.NewPCG(7, 7)), "")
}

// settleWith is settle with rng's order of deliveries; a failure's
// message begins with prefix.
func settleWith(t *testing.T, w *world, rng *rand.Rand, prefix string) {
	t.Helper()
	if w.quiet(rng); len(w.errs) > 0 {
		t.Fatalf("%s%s\nscript: %s", prefix, strings.Join(w.errs, "\n"), w.script())
	}
}

// runFor lets ms of time pass without healing anything: everything in
// flight is delivered every 100 ms, when the providers' and lease watches
// catch up. each, when set, checks the world every 100 ms.
func runFor(t *testing.T, w *world, ms int, each func()) {
	t.Helper()
	if w.pass(ms, 100, each); len(w.errs) > 0 {
		t.Fatalf("%s\nscript: %s", strings.Join(w.errs, "\n"), w.script())
	}
}

// pass lets ms of time pass in steps of step ms without healing anything:
// at each step everything in flight is delivered, the providers' and lease
// watches catch up, and each, when set, looks at the world. It stops at the
// first error (a broken promise, or a livelock).
func (w *world) pass(ms, step int, each func()) {
	rng := rand.New(rand.NewPCG(5, 5))
	for elapsed := 0; elapsed < ms && len(w.errs) == 0; elapsed += step {
		for steps := 0; w.busy() && len(w.errs) == 0; steps++ {
			w.exec(w.random(rng, false))
			if steps > maxQuiesceSteps {
				w.failf("livelock:\n%s", w.dump())
			}
		}
		w.exec(fmt.Sprintf("advance %d", step))
		for _, n := range w.runningNodes() {
			w.exec("topo " + string(n.id))
			w.exec("leases " + string(n.id))
		}
		if each != nil {
			each()
		}
	}
}

func delivered(w *world, node string) int {
	n := 0
	m := w.nodes[handover.NodeID(node)].member
	if m == nil || !m.running {
		return 0
	}
	for _, d := range m.delivering {
		if d {
			n++
		}
	}
	return n
}

func served(w *world) (unserved []int) {
	for r := range w.ranges {
		if len(w.callers(r)) == 0 {
			unserved = append(unserved, r)
		}
	}
	return unserved
}

// A member that cannot be reached (a partition: its messages are lost, and
// the provider keeps it) stalls only the handovers of the ranges its
// records name: a joining member asks a range's holder alone, and the
// holder keeps delivering meanwhile, so no range goes unserved. Cut after
// the newcomer heard it, the newcomer's view still has it, and sticky
// placement gives the newcomer ranges of the others too: those move
// without the cut member's answer.
func TestUnreachableMemberLeavesNoRangeUnserved(t *testing.T) {
	for _, heard := range []bool{false, true} {
		t.Run(fmt.Sprintf("heard=%v", heard), func(t *testing.T) {
			w := newWorld(t, 16)
			w.fifo = true
			w.exec("start m1")
			w.exec("start m2")
			w.exec("start m3")
			settle(t, w)
			if !heard {
				w.exec("cut m3")
			}
			w.exec("start m4")
			if heard {
				m3 := w.nodes["m3"].member.id
				for i := 0; !slices.Contains(w.nodes["m4"].member.core.Status().View, m3); i++ {
					if i > 50 {
						t.Fatalf("m4 has not heard from m3 in 5 s:\n%s", w.dump())
					}
					runFor(t, w, 100, nil)
				}
				w.exec("cut m3")
			}
			m3, m4 := w.nodes["m3"].member.id, w.nodes["m4"].member
			runFor(t, w, 3000, func() {
				if u := served(w); len(u) > 0 {
					t.Fatalf("ranges %v are served by nobody while m3 is cut off\n%s", u, w.dump())
				}
				for r, rs := range m4.core.Status().Ranges {
					if rs.State == "acquiring" && slices.Contains(rs.Waiting, m3) && !slices.Contains(w.callers(r), m3) {
						t.Fatalf("m4 waits for m3 on range %d, which m3 does not deliver\n%s", r, w.dump())
					}
				}
			})
			if heard && delivered(w, "m4") == 0 {
				t.Fatalf("m4 took none of m1's or m2's ranges while m3 was cut off:\n%s", w.dump())
			}
			w.exec("heal m3")
			settle(t, w)
			if delivered(w, "m4") == 0 {
				t.Fatal("m4 serves no range once m3 is reachable again")
			}
		})
	}
}

// A dead letter from a live member (its connection not established yet)
// is not an answer: the new owner asks again and waits.
func TestDeadLetterIsNotARelease(t *testing.T) {
	w := newWorld(t, 8)
	w.fifo = true
	w.exec("start m1")
	settle(t, w)
	w.exec("start m2")
	bounced := 0
	rng := rand.New(rand.NewPCG(9, 9))
	for steps := 0; steps < 20000 && bounced < 20; steps++ {
		i := slices.IndexFunc(w.net, func(m netMsg) bool {
			_, ok := m.body.(*handover.Acquire)
			return ok && m.to.Node() == "m1"
		})
		if i >= 0 {
			w.exec(fmt.Sprintf("bounce %d", i))
			bounced++
			continue
		}
		if !w.busy() {
			w.exec("advance 100")
			w.exec("topo m1")
			w.exec("topo m2")
			w.exec("leases m1")
			w.exec("leases m2")
			continue
		}
		w.exec(w.random(rng, false))
	}
	if len(w.errs) > 0 {
		t.Fatal(strings.Join(w.errs, "\n"))
	}
	if bounced == 0 {
		t.Fatal("no Acquire to m1 was bounced")
	}
	if n := delivered(w, "m2"); n != 0 {
		t.Fatalf("m2 delivers %d ranges though every ask to m1 came back undelivered", n)
	}
	settle(t, w)
	for _, mv := range w.moves {
		if mv.to.Node() == "m2" && (!mv.resumed || mv.from.Node() != "m1") {
			t.Errorf("range %d went to m2 from %q, not from m1's final position", mv.r, mv.from)
		}
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

// A rolling update (start a new member, then once the group is settled
// have an old one leave, three times) moves every range from a member that
// delivers it: each new owner names that member in its StartRange, so that
// it starts from the member's copy and lists nothing. Messages are
// delivered in a random order (in order per connection) under each seed.
func TestRollingUpdateStartsWarm(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 30
	}
	for seed := range seeds {
		w := newWorld(t, 16)
		w.fifo = true
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		quiet := func() {
			t.Helper()
			settleWith(t, w, rng, fmt.Sprintf("seed %d: ", seed))
		}
		for _, n := range []string{"m1", "m2", "m3"} {
			w.exec("start " + n)
		}
		quiet()
		w.starts = nil
		for k := 1; k <= 3; k++ {
			w.exec(fmt.Sprintf("start n%d", k))
			quiet()
			w.exec(fmt.Sprintf("leave m%d", k))
			quiet()
		}
		for _, s := range w.starts {
			if s.from == "" {
				t.Errorf("seed %d: %s started range %d cold (%s)", seed, s.member, s.r, s.why)
			}
		}
		if t.Failed() {
			t.Fatalf("seed %d: script: %s", seed, w.script())
		}
	}
}

// Members that start one after another list each range once: the first
// forms a group alone and lists every range, the others join while its
// lists go on (none of them has synced when they start; the rest sync at
// random among the joins' messages). A range that a member lists stays
// with it until it delivers the range, and then moves as a copy of its
// cache: 16 cold starts in all, none by the members that joined.
func TestStaggeredStartListsEachRangeOnce(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 30
	}
	for seed := range seeds {
		w := newWorld(t, 16)
		w.fifo = true
		rng := rand.New(rand.NewPCG(uint64(seed), 12))
		w.exec("start m1")
		// m1 forms alone and starts every range; no list ends meanwhile.
		for round := 0; round < 50 && len(w.starts) < 16 && len(w.errs) == 0; round++ {
			for range 200 {
				if line := w.random(rng, false); !strings.HasPrefix(line, "effect") {
					w.exec(line)
				}
			}
			w.exec("advance 200")
			w.exec("topo m1")
			w.exec("leases m1")
		}
		if len(w.starts) != 16 {
			t.Fatalf("seed %d: m1 started %d ranges alone, not 16: %s\nscript: %s", seed, len(w.starts), strings.Join(w.errs, "\n"), w.script())
		}
		w.exec("start m2")
		w.exec("start m3")
		settleWith(t, w, rng, fmt.Sprintf("seed %d: ", seed))
		cold := 0
		for _, s := range w.starts {
			if s.from == "" {
				cold++
				if s.member.Node() != "m1" {
					t.Errorf("seed %d: %s started range %d cold (%s)", seed, s.member, s.r, s.why)
				}
			}
		}
		if cold != 16 {
			t.Errorf("seed %d: %d cold starts, not 16", seed, cold)
		}
		if t.Failed() {
			t.Fatalf("seed %d: script: %s", seed, w.script())
		}
	}
}
