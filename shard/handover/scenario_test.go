package handover_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

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

// runFor lets ms of time pass without healing anything: everything in
// flight is delivered every 100 ms, when the providers' and lease watches
// catch up. each, when set, checks the world every 100 ms.
func runFor(t *testing.T, w *world, ms int, each func()) {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, 5))
	for elapsed := 0; elapsed < ms; elapsed += 100 {
		for steps := 0; w.busy(); steps++ {
			w.exec(w.random(rng, false))
			if steps > maxQuiesceSteps {
				t.Fatalf("livelock:\n%s", w.dump())
			}
		}
		w.exec("advance 100")
		for _, n := range w.runningNodes() {
			w.exec("topo " + string(n.id))
			w.exec("leases " + string(n.id))
		}
		if each != nil {
			each()
		}
		if len(w.errs) > 0 {
			t.Fatalf("%s\nscript: %s", strings.Join(w.errs, "\n"), w.script())
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
// the provider keeps it) stalls the handovers to a joining member, which
// needs its answer. The ranges' deliverers are asked last, so they keep
// delivering meanwhile: no range goes unserved. Cut before the newcomer
// heard it, the member's ranges are the ones the newcomer waits for; cut
// after, the newcomer also takes ranges from the others (sticky placement
// takes the surplus of every member), and those wait for its answer.
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
			fromOthers := false // m4 waited for m3 on a range m1 or m2 delivers
			runFor(t, w, 3000, func() {
				if u := served(w); len(u) > 0 {
					t.Fatalf("ranges %v are served by nobody while m3 is cut off\n%s", u, w.dump())
				}
				for r, rs := range m4.core.Status().Ranges {
					if rs.State == "acquiring" && slices.Contains(rs.Waiting, m3) && len(w.callers(r)) > 0 && !slices.Contains(w.callers(r), m3) {
						fromOthers = true
					}
				}
			})
			if heard && !fromOthers {
				t.Fatalf("m4 never waited for m3 on a range of m1's or m2's:\n%s", w.dump())
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
		if mv.to.Node() == "m2" && (!mv.handoff || mv.from.Node() != "m1") {
			t.Errorf("range %d went to m2 from %q without m1's handoff", mv.r, mv.from)
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

// Direct tests of one core: the rules the random runs reach only rarely.

func testConfig(self handover.MemberID, ranges int) handover.Config {
	return handover.Config{Self: self, Ranges: ranges, HashField: "uid", DiscoveryTicks: 1,
		LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod,
		FirstAsk: -1}
}

// ownerOfZero returns a member id that owns range 0 against self.
func ownerOfZero(self handover.MemberID) handover.MemberID {
	return newOwnerOfZero("n", self)
}

// newOwnerOfZero returns a member id named prefix and a number, not one of
// others, that owns range 0 against others.
func newOwnerOfZero(prefix string, others ...handover.MemberID) handover.MemberID {
	for i := 0; ; i++ {
		id := handover.NewMemberID(handover.NodeID(fmt.Sprintf("%s%d", prefix, i)), "1")
		if !slices.Contains(others, id) && handover.Assign(append(slices.Clone(others), id), 1)[0] == id {
			return id
		}
	}
}

// untilDeactivated ticks c from 21 ticks on, out being what its last step
// gave, until a step gives a DeactivateRange; it gives up at 40 ticks.
func untilDeactivated(c *handover.Core, out []stage.Msg) (*handover.DeactivateRange, bool) {
	for now := 21 * simTick; now < 40*simTick; now += simTick {
		if d, ok := find[*handover.DeactivateRange](out); ok {
			return d, true
		}
		out = c.Step(&handover.Tick{Now: now})
	}
	return find[*handover.DeactivateRange](out)
}

func find[T any](out []stage.Msg) (T, bool) {
	for _, m := range out {
		if b, ok := m.Body.(T); ok {
			return b, true
		}
	}
	var zero T
	return zero, false
}

// joined returns a core of self that has its lease, sees its own lease,
// knows peer and has ended discovery.
func joined(t *testing.T, self, peer handover.MemberID, ranges int) *handover.Core {
	t.Helper()
	c, _ := joinedAfter(self, peer, ranges, &handover.LeaseRenewed{Seq: 1, Start: 0, Token: 10}, handover.LeaseRecord{Holder: self, Version: "10"})
	return c
}

// joinedAfter is joined with answer given to the first lease write (Seq
// 1) and leases in the snapshot that follows; it also returns all the
// core sent on the way.
func joinedAfter(self, peer handover.MemberID, ranges int, answer handover.Input, leases ...handover.LeaseRecord) (*handover.Core, []stage.Msg) {
	c := handover.NewCore(testConfig(self, ranges))
	var out []stage.Msg
	for _, in := range []handover.Input{
		&handover.Topology{Nodes: []handover.NodeID{self.Node(), peer.Node()}},
		answer,
		&handover.Leases{Leases: leases},
		&handover.Hello{From: peer, Ranges: ranges, HashField: "uid", Reply: true},
		&handover.Tick{Now: simTick},
		&handover.Tick{Now: 2 * simTick},
	} {
		out = append(out, c.Step(in)...)
	}
	return c, out
}

// acquiringZero returns a core of self (owner of range 0) that asks peer
// for range 0, and the epoch it asks with.
func acquiringZero(t *testing.T) (c *handover.Core, self, peer handover.MemberID, epoch uint64) {
	t.Helper()
	peer = handover.NewMemberID("peer", "1")
	self = ownerOfZero(peer)
	c = joined(t, self, peer, 1)
	st := c.Status().Ranges[0]
	if st.State != "syncing" {
		t.Fatalf("range 0 is %s, want syncing: %+v", st.State, c.Status())
	}
	ask, ok := find[*handover.Acquire](c.Step(&handover.RangeSynced{Range: 0, Epoch: st.Epoch}))
	if !ok {
		t.Fatalf("no Acquire after sync: %+v", c.Status())
	}
	return c, self, peer, ask.Epoch
}

// activateOnVoidLease has c (acquiring range 0 from peer) see peer's lease
// released, so that it claims the range without peer's answer; before, if
// not nil, is that answer arriving while the range is claimed. It returns
// the activation.
func activateOnVoidLease(t *testing.T, c *handover.Core, self, peer handover.MemberID, before *handover.Released) *handover.ActivateRange {
	t.Helper()
	out := slices.Clone(c.Step(&handover.Leases{Now: 3 * simTick, Leases: []handover.LeaseRecord{{Holder: self, Version: "10"}, {Holder: peer, Version: "7"}}}))
	out = append(out, c.Step(&handover.Leases{Now: 3 * simTick, Leases: []handover.LeaseRecord{{Holder: self, Version: "10"}}, Released: []handover.MemberID{peer}})...)
	out = append(out, c.Step(&handover.Tick{Now: 4 * simTick})...)
	if st := c.Status().Ranges[0]; st.State != "claiming" {
		t.Fatalf("range 0 is %s once the peer's lease is released, want claiming", st.State)
	}
	if before != nil {
		out = append(out, c.Step(before)...)
	}
	// The write in flight fails; the next ones are answered until one
	// gives the range.
	for seq := uint64(2); seq < 6; seq++ {
		out = append(out, c.Step(&handover.LeaseRenewFailed{Seq: seq})...)
	}
	return untilActive(t, c, out)
}

// writesAnswered steps c with in and answers every lease write it asks
// for meanwhile (started at now, tokens from *token on), so that its claim
// stays valid; it returns all that c sent.
func writesAnswered(c *handover.Core, token *uint64, in handover.Input, now time.Duration) []stage.Msg {
	out := c.Step(in)
	all := slices.Clone(out) // c reuses its outbox at the next step
	for {
		next, ok := answerWrites(c, out, now, token)
		if !ok {
			return all
		}
		out = next
		all = append(all, out...)
	}
}

// answerWrites answers the lease writes in out, as the API server does,
// with versions from *token on, and returns what c sent meanwhile; ok is
// false when out asks for none.
func answerWrites(c *handover.Core, out []stage.Msg, now time.Duration, token *uint64) (next []stage.Msg, ok bool) {
	var asked []*handover.RenewLease // out is c's outbox: read before stepping c
	for _, m := range out {
		if w, ok := m.Body.(*handover.RenewLease); ok {
			asked = append(asked, w)
		}
	}
	for _, w := range asked {
		next = append(next, c.Step(&handover.LeaseRenewed{Seq: w.Seq, Start: now, Now: now, Token: *token})...)
		*token++
	}
	return next, len(asked) > 0
}

// untilActive answers c's lease writes from out on (tokens from 20) and
// ticks until it activates range 0.
func untilActive(t *testing.T, c *handover.Core, out []stage.Msg) *handover.ActivateRange {
	t.Helper()
	var act *handover.ActivateRange
	now, token := 5*simTick, uint64(20)
	for act == nil && now < 2*time.Second {
		if next, ok := answerWrites(c, out, now, &token); ok {
			out = next
		} else {
			out = c.Step(&handover.Tick{Now: now})
		}
		act, _ = find[*handover.ActivateRange](out)
		now += simTick
	}
	if act == nil {
		t.Fatalf("not activated: %+v", c.Status())
	}
	return act
}

// A late Handoff (as above) does not go on to the next owner with this
// member's own Handoff, whether it arrived while the range was delivered
// or being released again: this member's final position covers it (its
// activation resumed from an older position, whose replay gave every
// delete since).
func TestLateHandoffGoesOnWithTheRelease(t *testing.T) {
	for _, whileActive := range []bool{false, true} {
		c, self, peer, epoch := acquiringZero(t)
		act := activateOnVoidLease(t, c, self, peer, nil)
		late := handover.Handoff{Range: 0, Token: 9, Version: "30"}
		lateRel := &handover.Released{From: peer, Epoch: epoch, Ranges: []int{0}, Handoffs: []handover.Handoff{late}}
		if whileActive {
			c.Step(lateRel)
		}
		// A newcomer joins, and this member leaves: the newcomer asks for
		// the range, and it is drained.
		next := handover.NewMemberID("next", "1")
		c.Step(&handover.Topology{Nodes: []handover.NodeID{self.Node(), next.Node()}})
		c.Step(&handover.Hello{From: next, Ranges: 1, HashField: "uid", Reply: true})
		c.Step(&handover.Leases{Now: 20 * simTick, Leases: []handover.LeaseRecord{{Holder: self, Version: "30"}, {Holder: next, Version: "31"}}})
		c.Step(&handover.Leave{})
		if _, ok := untilDeactivated(c, c.Step(&handover.Acquire{From: next, Epoch: 50, Ranges: []int{0}})); !ok {
			t.Fatalf("range 0 not released to the asker: %+v", c.Status())
		}
		if !whileActive {
			c.Step(lateRel)
		}
		own := &handover.Handoff{Range: 0, Token: act.Token, Version: "40", Position: 41, From: self, Record: 77}
		rel, ok := find[*handover.Released](c.Step(&handover.RangeStopped{Range: 0, Epoch: act.Epoch, Handoff: own}))
		if !ok {
			t.Fatalf("no answer to the asker once stopped: %+v", c.Status())
		}
		var got *handover.Handoff
		for i := range rel.Handoffs {
			if rel.Handoffs[i].Range == 0 {
				got = &rel.Handoffs[i]
			}
		}
		want := *own
		want.Next, want.NextEpoch = next, 50 // the release's record write named the asker, for its ask
		if got == nil || !reflect.DeepEqual(*got, want) {
			t.Fatalf("while active %v: handoff %+v, want this member's own, naming the asker: %+v", whileActive, got, want)
		}
	}
}

// A late Handoff that comes after this member released the range (its
// own Handoff sent) goes nowhere: the member it was released to resumes
// from this member's final position, which covers it. A supplement (a
// member that predates positions sends them) is ignored.
func TestLateHandoffAfterTheReleaseFollowsIt(t *testing.T) {
	// A member alone delivers ranges 0 and 1, activated on a void lease:
	// without their previous deliverer's (peer's) answer.
	self, peer := handover.NewMemberID("self", "1"), handover.NewMemberID("peer", "1")
	c := handover.NewCore(testConfig(self, 2))
	c.Step(&handover.Topology{Nodes: []handover.NodeID{self.Node()}})
	c.Step(&handover.LeaseRenewed{Seq: 1, Start: 0, Token: 10})
	c.Step(&handover.Leases{Leases: []handover.LeaseRecord{{Holder: self, Version: "10"}}})
	var out []stage.Msg
	for now := simTick; now <= 3*simTick; now += simTick {
		out = append(out, c.Step(&handover.Tick{Now: now})...)
	}
	for r, st := range c.Status().Ranges {
		out = append(out, c.Step(&handover.RangeSynced{Range: r, Epoch: st.Epoch})...)
	}
	acts := map[int]*handover.ActivateRange{}
	now, token := 4*simTick, uint64(20)
	for len(acts) < 2 && now < 2*time.Second {
		for _, m := range out {
			if a, ok := m.Body.(*handover.ActivateRange); ok {
				acts[a.Range] = a
			}
		}
		if next, ok := answerWrites(c, out, now, &token); ok {
			out = next
		} else {
			out = c.Step(&handover.Tick{Now: now})
		}
		now += simTick
	}
	if len(acts) < 2 || acts[0].Handoff != nil {
		t.Fatalf("activations %v, want both ranges, without a handoff: %+v", acts, c.Status())
	}
	// A newcomer joins and this member leaves: both ranges are drained for
	// the newcomer; range 0 stops first, and goes with its own Handoff.
	next := handover.NewMemberID("next", "1")
	c.Step(&handover.Topology{Nodes: []handover.NodeID{self.Node(), next.Node()}})
	c.Step(&handover.Hello{From: next, Ranges: 2, HashField: "uid", Reply: true})
	c.Step(&handover.Leases{Now: now, Leases: []handover.LeaseRecord{{Holder: self, Version: "30"}, {Holder: next, Version: "31"}}})
	c.Step(&handover.Leave{})
	out = c.Step(&handover.Acquire{From: next, Epoch: 50, Ranges: []int{0, 1}})
	for end := now + 20*simTick; now < end; now += simTick {
		if _, ok := find[*handover.DeactivateRange](out); ok {
			break
		}
		out = c.Step(&handover.Tick{Now: now})
	}
	if st := c.Status().Ranges[0]; st.State != "deactivating" {
		t.Fatalf("range 0 is %s, want deactivating for the newcomer", st.State)
	}
	own := &handover.Handoff{Range: 0, Token: acts[0].Token, Version: "40", From: self}
	out = c.Step(&handover.RangeStopped{Range: 0, Epoch: acts[0].Epoch, Handoff: own})
	var to stage.Addr
	for _, m := range out {
		if rel, ok := m.Body.(*handover.Released); ok && rel.Epoch == 50 && len(rel.Handoffs) == 1 {
			to = m.To
		}
	}
	if to == (stage.Addr{}) {
		t.Fatalf("no answer with the handoff once range 0 stopped: %v; %+v", out, c.Status())
	}
	// The previous deliverer's answer comes now: nothing follows the
	// release (no supplement), and the shell is given nothing.
	late := handover.Handoff{Range: 0, Token: 9, Version: "30"}
	out = c.Step(&handover.Released{From: peer, Epoch: acts[0].Epoch, Ranges: []int{0}, Handoffs: []handover.Handoff{late}})
	for _, m := range out {
		if _, ok := m.Body.(*handover.Released); ok || m.To == handover.ToRanges {
			t.Fatalf("a late answer after the release gave %T to %v", m.Body, m.To)
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
			if !w.quiesce(rng) && len(w.errs) == 0 {
				w.failf("no quiescence:\n%s", w.dump())
			}
			if len(w.errs) == 0 {
				w.checkQuiet()
			}
			if len(w.errs) > 0 {
				t.Fatalf("seed %d: %s\nscript: %s", seed, strings.Join(w.errs, "\n"), w.script())
			}
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

// nodesOf is the topology of the members' nodes.
func nodesOf(ids ...handover.MemberID) *handover.Topology {
	tp := &handover.Topology{}
	for _, id := range ids {
		tp.Nodes = append(tp.Nodes, id.Node())
	}
	return tp
}

// drive steps c with in, then hands each effect to answer, stepping c
// with what answer returns, until no effect is left.
func drive(c *handover.Core, in handover.Input, answer func(body any) []stage.Msg) {
	out := slices.Clone(c.Step(in))
	for len(out) > 0 {
		var next []stage.Msg
		for _, m := range out {
			next = slices.Clone(append(next, answer(m.Body)...))
		}
		out = next
	}
}

// leaverScene is a member (self) that delivered range 0 under token
// delivered, left, and released the range with its handoff to peer, which
// asked for it; step drives it, answering its lease writes and its range
// effects, and keeps what it sent.
type leaverScene struct {
	c          *handover.Core
	self, peer handover.MemberID
	delivered  uint64
	now        time.Duration
	left       *handover.Left
	rel        *handover.Released
	hellos     []*handover.Hello
}

func leaverReleased(t *testing.T) *leaverScene {
	t.Helper()
	sc := &leaverScene{now: 3 * simTick}
	var epoch uint64
	sc.c, sc.self, sc.peer, epoch = acquiringZero(t)
	sc.step(&handover.Released{From: sc.peer, Epoch: epoch, Ranges: []int{0}})
	if st := sc.c.Status().Ranges[0].State; st != "active" {
		t.Fatalf("range 0 is %s, want active: %+v", st, sc.c.Status())
	}
	sc.step(&handover.Leave{})
	sc.step(&handover.Acquire{From: sc.peer, Epoch: 50, Ranges: []int{0}})
	if sc.rel == nil || len(sc.rel.Handoffs) != 1 || sc.rel.Handoffs[0].Token != sc.delivered {
		t.Fatalf("released with %+v, want the handoff of token %d", sc.rel, sc.delivered)
	}
	return sc
}

func (sc *leaverScene) step(in handover.Input) {
	drive(sc.c, in, func(body any) []stage.Msg {
		switch e := body.(type) {
		case *handover.RenewLease:
			return sc.c.Step(&handover.LeaseRenewed{Seq: e.Seq, Start: sc.now, Token: 20 + e.Seq})
		case *handover.ActivateRange:
			sc.delivered = e.Token
		case *handover.DeactivateRange:
			h := &handover.Handoff{Range: e.Range, Token: sc.delivered, From: sc.self}
			return sc.c.Step(&handover.RangeStopped{Range: e.Range, Epoch: e.Epoch, Handoff: h})
		case *handover.Released:
			sc.rel = e
		case *handover.Left:
			sc.left = e
		case *handover.Hello:
			sc.hellos = append(sc.hellos, e)
		}
		return nil
	})
}

func (sc *leaverScene) tick() {
	sc.now += simTick
	sc.step(&handover.Tick{Now: sc.now})
}

// A member's Hellos name each range it released, to whom, and the token
// it delivered the range under: a receiver weighs the move against the
// deliveries and moves it knows of by that token (an older move, in a
// late Hello, does not place the range).
func TestHelloNamesTheMovesToken(t *testing.T) {
	sc := leaverReleased(t)
	if len(sc.hellos) == 0 {
		t.Fatal("no Hello after the release")
	}
	// The leaver's last Hello (its Gone) names the move.
	if h := sc.hellos[len(sc.hellos)-1]; len(h.Moved) != 1 || h.Moved[0] != (handover.Move{Range: 0, To: sc.peer, Token: sc.delivered}) {
		t.Fatalf("the last Hello names the moves %+v, want range 0's to %s under token %d", h.Moved, sc.peer, sc.delivered)
	}
}

// A leaver goes as soon as it delivers nothing: it does not wait for the
// member it released a range to, or for anyone, to take its handoff,
// since the range's record holds its final position.
func TestLeaverGoesOnceItDeliversNothing(t *testing.T) {
	sc := leaverReleased(t)
	if sc.left == nil {
		t.Fatalf("the leaver released its only range and has not left: %+v", sc.c.Status())
	}
	if sc.left.TimeUp {
		t.Fatal("left with TimeUp, want a leave in time")
	}
}

// A member answers every ask of a range it released with its own final
// handoff (what its handlers were given), however often it is asked (an
// answer may be lost). A handoff it was given by another member is never
// passed on: only a member's own delivery's position leaves it.
func TestEveryAnswerCarriesTheMembersOwnFinalHandoff(t *testing.T) {
	self := handover.NewMemberID("self", "1")
	sc := &leaverScene{c: handover.NewCore(testConfig(self, 2)), self: self, now: simTick}
	tokens := map[int]uint64{}
	var stopped []int
	step := func(in handover.Input) {
		drive(sc.c, in, func(body any) []stage.Msg {
			switch e := body.(type) {
			case *handover.RenewLease:
				return sc.c.Step(&handover.LeaseRenewed{Seq: e.Seq, Start: sc.now, Token: 20 + e.Seq})
			case *handover.StartRange:
				return sc.c.Step(&handover.RangeSynced{Range: e.Range, Epoch: e.Epoch})
			case *handover.ActivateRange:
				tokens[e.Range] = e.Token
			case *handover.DeactivateRange:
				stopped = append(stopped, e.Range)
				h := &handover.Handoff{Range: e.Range, Token: tokens[e.Range], From: self, Position: 99}
				return sc.c.Step(&handover.RangeStopped{Range: e.Range, Epoch: e.Epoch, Handoff: h})
			case *handover.Released:
				sc.rel = e
			}
			return nil
		})
	}
	step(&handover.Topology{Nodes: []handover.NodeID{self.Node()}})
	step(&handover.Leases{Leases: []handover.LeaseRecord{{Holder: self, Version: "10"}}})
	for ; sc.now < time.Second && len(tokens) < 2; sc.now += simTick {
		step(&handover.Tick{Now: sc.now})
	}
	if len(tokens) < 2 {
		t.Fatalf("not both ranges active: %+v", sc.c.Status())
	}
	// peer joins, self leaves: peer owns both ranges and asks for range 0
	// only. Range 1 is still delivered, so self stays, and answers.
	peer := handover.NewMemberID("peer", "1")
	step(&handover.Topology{Nodes: []handover.NodeID{self.Node(), peer.Node()}})
	step(&handover.Hello{From: peer, Ranges: 2, HashField: "uid", Reply: true})
	step(&handover.Leases{Now: sc.now, Leases: []handover.LeaseRecord{{Holder: self, Version: "30"}, {Holder: peer, Version: "31"}}})
	step(&handover.Leave{})
	own := func(rel *handover.Released) bool {
		return rel != nil && slices.Equal(rel.Ranges, []int{0}) && len(rel.Handoffs) == 1 &&
			rel.Handoffs[0].Token == tokens[0] && rel.Handoffs[0].From == self && rel.Handoffs[0].Position == 99
	}
	for i, e := range []uint64{70, 70, 80} {
		if i == 2 {
			// A handoff another member sends self is not kept or passed on.
			step(&handover.Released{From: peer, Epoch: 3, Ranges: []int{0},
				Handoffs: []handover.Handoff{{Range: 0, Token: tokens[0] + 50, From: peer, Position: 500}}})
		}
		sc.rel = nil
		step(&handover.Acquire{From: peer, Epoch: e, Ranges: []int{0}})
		for n := 0; sc.rel == nil && n < 10; n++ {
			sc.now += simTick
			step(&handover.Tick{Now: sc.now})
		}
		if !own(sc.rel) {
			t.Fatalf("ask %d (epoch %d) answered with %+v, want only self's own handoff of token %d: %+v", i, e, sc.rel, tokens[0], sc.c.Status())
		}
	}
	if !slices.Equal(stopped, []int{0}) {
		t.Fatalf("ranges %v released, want range 0 only", stopped)
	}
}

// A move a peer announces (Hello.Moved) that is older than this member's
// own delivery of the range does not outweigh this member's release of it:
// the member it released the range to gets its answer, with the handoff.
// Gentle seed 218424: the asker's Hellos still named its own release of the
// range, long before; the releaser took the range for the old move's
// target's, never answered the asker, and gave its handoff to the old
// target later, after the asker had claimed the range without it.
func TestOwnDeliveryOutweighsAnOlderMove(t *testing.T) {
	for _, tc := range []struct {
		name   string
		token  func(own uint64) uint64 // the move's token
		answer bool                    // the asker is answered at once
	}{
		{"move older than the own delivery", func(own uint64) uint64 { return own - 10 }, true},
		{"move names no token", func(uint64) uint64 { return 0 }, false},
		{"move newer than the own delivery", func(own uint64) uint64 { return own + 10 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, self, peer, _ := acquiringZero(t)
			act := activateOnVoidLease(t, c, self, peer, nil)
			// asker and other join; this member leaves, and asker, the
			// owner of range 0 in the view of the two, asks for it.
			var asker, other handover.MemberID
			for i := 0; asker == ""; i++ {
				a, b := handover.NewMemberID(handover.NodeID(fmt.Sprintf("a%d", i)), "1"), handover.NewMemberID("b", "1")
				if handover.Place([]handover.MemberID{a, b}, nil, 1, 0)[0] == a {
					asker, other = a, b
				}
			}
			c.Step(&handover.Topology{Nodes: []handover.NodeID{self.Node(), asker.Node(), other.Node()}})
			c.Step(&handover.Hello{From: asker, Ranges: 1, HashField: "uid", JoinedAt: 1, Reply: true})
			c.Step(&handover.Hello{From: other, Ranges: 1, HashField: "uid", JoinedAt: 1, Reply: true})
			c.Step(&handover.Leases{Now: 20 * simTick, Leases: []handover.LeaseRecord{{Holder: self, Version: "30"}, {Holder: asker, Version: "31"}, {Holder: other, Version: "32"}}})
			c.Step(&handover.Leave{})
			if d, ok := untilDeactivated(c, c.Step(&handover.Acquire{From: asker, Epoch: 50, Ranges: []int{0}})); !ok || d.To != asker {
				t.Fatalf("range 0 not drained for the asker (%+v): %+v", d, c.Status())
			}
			// While it drains, the asker's Hello still names a move of
			// range 0 to other.
			c.Step(&handover.Hello{From: asker, Ranges: 1, HashField: "uid", JoinedAt: 1, View: []handover.MemberID{asker, other},
				Moved: []handover.Move{{Range: 0, To: other, Token: tc.token(act.Token)}}, Reply: true})
			own := &handover.Handoff{Range: 0, Token: act.Token, Version: "40", From: self}
			rel, ok := find[*handover.Released](c.Step(&handover.RangeStopped{Range: 0, Epoch: act.Epoch, Handoff: own}))
			answered := ok && len(rel.Handoffs) == 1 && rel.Handoffs[0].Token == act.Token
			if answered != tc.answer {
				t.Fatalf("the asker answered with its handoff: %v (%+v), want %v; owner %s", answered, rel, tc.answer, c.Status().Ranges[0].Owner)
			}
		})
	}
}

// A move older than a delivery this member heard of does not place the
// range: a move that arrives after a newer one (its Hello late) does not
// replace it, and one that comes after its target said it delivered the
// range under a newer token is stale.
func TestLateHelloOfAnOlderMove(t *testing.T) {
	self := handover.NewMemberID("m", "1")
	x := handover.NewMemberID("x", "1")
	// y and z: neither owns range 0 by placement alone.
	var y, z handover.MemberID
	for i := 0; z == "" && i < 1000; i++ {
		y, z = handover.NewMemberID(handover.NodeID(fmt.Sprintf("y%d", i)), "1"), handover.NewMemberID(handover.NodeID(fmt.Sprintf("z%d", i)), "1")
		if a := handover.Place([]handover.MemberID{self, x, y, z}, nil, 1, 0)[0]; a == y || a == z {
			z = ""
		}
	}
	if z == "" {
		t.Fatal("no y and z that placement alone gives nothing")
	}
	plain := handover.Place([]handover.MemberID{self, x, y, z}, nil, 1, 0)[0]
	for _, tc := range []struct {
		name  string
		moveZ bool // y moved the range on to z
		want  handover.MemberID
	}{
		{"after a newer move", true, z},
		{"after a newer delivery", false, plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := handover.NewCore(testConfig(self, 1))
			c.Step(&handover.Topology{Nodes: []handover.NodeID{self.Node(), x.Node(), y.Node(), z.Node()}})
			c.Step(&handover.LeaseRenewed{Seq: 1, Start: 0, Token: 10})
			c.Step(&handover.Leases{Leases: []handover.LeaseRecord{{Holder: self, Version: "10"}}})
			hello := func(from handover.MemberID, active []int, tokens []uint64, moved []handover.Move) {
				c.Step(&handover.Hello{From: from, Ranges: 1, HashField: "uid", JoinedAt: 1, Active: active, Tokens: tokens, Moved: moved, Reply: true})
			}
			hello(x, nil, nil, nil)
			hello(z, nil, nil, nil)
			// y delivered range 0 under 30 (x had released it to y), then
			// released it to z, or stopped it.
			hello(y, []int{0}, []uint64{30}, nil)
			if tc.moveZ {
				hello(y, nil, nil, []handover.Move{{Range: 0, To: z, Token: 30}})
			} else {
				hello(y, nil, nil, nil)
			}
			// x's Hello naming its own move of the range to y comes late.
			hello(x, nil, nil, []handover.Move{{Range: 0, To: y, Token: 20}})
			c.Step(&handover.Tick{Now: simTick})
			c.Step(&handover.Tick{Now: 2 * simTick})
			if owner := c.Status().Ranges[0].Owner; owner != tc.want {
				t.Fatalf("range 0 placed on %s, want %s", owner, tc.want)
			}
		})
	}
}
