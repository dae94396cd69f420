package handover_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// The simulator runs several members' cores in one goroutine: a network
// that delivers, reorders and loses their messages, a provider whose
// topology reaches each member late, range informers that sync and stop
// after a while, and joins, graceful leaves and kills. After every step no
// range may be delivered by two members; once the churn stops and every
// message has arrived, every range must be delivered by exactly its owner,
// on which all members agree.

var (
	simSeeds  = flag.Int("handover.seeds", 3000, "random runs")
	simSeed   = flag.Int("handover.seed", 1, "first seed")
	simSteps  = flag.Int("handover.steps", 400, "steps of churn per run")
	simScript = flag.String("handover.script", "", "replay a script (a file, or lines separated by ';')")
)

type simMember struct {
	id         handover.MemberID
	core       *handover.Core
	alive      bool // the process runs
	running    bool // its group actor runs (from start to Left or a kill)
	local      []any
	delivering map[int]bool // the shell's view: handlers attached, not yet stopped
	left       bool
	failed     string
	ranges     int
	field      string
}

type move struct {
	r        int
	from, to handover.MemberID
}

type netMsg struct {
	from, to handover.MemberID
	body     any
}

type effect struct {
	member handover.MemberID
	report any
	// deactivate: the range stops being delivered when the effect completes.
	deactivate int
}

type world struct {
	t        testing.TB
	ranges   int
	members  map[handover.MemberID]*simMember
	order    []handover.MemberID
	net      []netMsg
	effects  []effect
	provider map[handover.MemberID]bool
	nextID   int
	clock    int64
	lines    []string
	churn    int // lines before quiescence
	trace    func(string)
	// fifo keeps each sender's messages to one recipient in order; without
	// it the network reorders them too.
	fifo bool
	// cut are the partitioned members: their messages are lost both ways.
	cut   map[handover.MemberID]bool
	moves []move
	errs  []string
}

func newWorld(t testing.TB, ranges int) *world {
	return &world{t: t, ranges: ranges, members: map[handover.MemberID]*simMember{}, provider: map[handover.MemberID]bool{}}
}

func (w *world) failf(format string, args ...any) {
	w.errs = append(w.errs, fmt.Sprintf("after %q: ", w.lines[len(w.lines)-1])+fmt.Sprintf(format, args...))
}

func (w *world) topology() *handover.Topology {
	var ms []handover.MemberID
	for _, id := range w.order {
		if w.provider[id] {
			ms = append(ms, id)
		}
	}
	return &handover.Topology{Members: ms}
}

// pushTopology: the provider's list reaches every member whose process runs,
// through its mailbox.
func (w *world) pushTopology() {
	for _, id := range w.order {
		if m := w.members[id]; m.alive && m.running {
			m.local = append(m.local, w.topology())
		}
	}
}

func (w *world) step(m *simMember, in any) {
	if !m.running {
		return
	}
	out := m.core.Step(in)
	if w.trace != nil {
		w.trace(fmt.Sprintf("%s <- %T%+v", m.id, in, in))
		for _, msg := range out {
			w.trace(fmt.Sprintf("   -> %v %T%+v", msg.To, msg.Body, msg.Body))
		}
	}
	for _, msg := range out {
		switch msg.To.Kind {
		case handover.Member:
			w.net = append(w.net, netMsg{from: m.id, to: m.core.Member(msg.To.ID), body: msg.Body})
		case handover.Ranges:
			w.effect(m, msg.Body)
		default:
			w.failf("%s sent to %v", m.id, msg.To)
		}
	}
}

func (w *world) effect(m *simMember, body any) {
	switch e := body.(type) {
	case *handover.StartRange:
		w.effects = append(w.effects, effect{member: m.id, report: &handover.RangeSynced{Range: e.Range, Epoch: e.Epoch}, deactivate: -1})
	case *handover.ActivateRange:
		w.moves = append(w.moves, move{r: e.Range, from: e.From, to: m.id})
		if m.delivering[e.Range] {
			w.failf("%s activates range %d, which it delivers already", m.id, e.Range)
		}
		m.delivering[e.Range] = true
	case *handover.DeactivateRange:
		if !m.delivering[e.Range] {
			w.failf("%s deactivates range %d, which it does not deliver", m.id, e.Range)
		}
		w.effects = append(w.effects, effect{member: m.id, report: &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch}, deactivate: e.Range})
	case *handover.StopRange:
		w.effects = append(w.effects, effect{member: m.id, report: &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch}, deactivate: -1})
	case *handover.Failed:
		m.failed = e.Reason
	case *handover.Left:
		m.running = false
		m.left = true
		for r, d := range m.delivering {
			if d {
				w.failf("%s left while it delivers range %d", m.id, r)
			}
		}
	default:
		w.failf("%s: unknown effect %T", m.id, body)
	}
}

func (w *world) member(name string) *simMember {
	m := w.members[handover.MemberID(name)]
	if m == nil {
		w.failf("no member %s", name)
	}
	return m
}

// exec runs one script line.
func (w *world) exec(line string) {
	w.lines = append(w.lines, line)
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	arg := func(i int) int {
		if len(f) <= i {
			w.failf("missing argument")
			return -1
		}
		n, err := strconv.Atoi(f[i])
		if err != nil {
			w.failf("bad number %q", f[i])
			return -1
		}
		return n
	}
	switch f[0] {
	case "start": // start NAME [RANGES FIELD]
		ranges, field := w.ranges, "uid"
		if len(f) >= 4 {
			ranges, field = arg(2), f[3]
		}
		w.clock++
		id := handover.MemberID(f[1])
		m := &simMember{id: id, alive: true, running: true, delivering: map[int]bool{}, ranges: ranges, field: field,
			core: handover.NewCore(handover.Config{Self: id, Ranges: ranges, HashField: field, JoinedAt: w.clock})}
		w.members[id] = m
		w.order = append(w.order, id)
		w.provider[id] = true
		w.pushTopology()
	case "kill": // the process dies: its handlers' calls end now
		m := w.member(f[1])
		if m == nil {
			return
		}
		m.alive, m.running = false, false
		clear(m.delivering)
		m.local = nil
	case "expire": // the provider notices a dead process, or one that left the cluster
		delete(w.provider, handover.MemberID(f[1]))
		w.pushTopology()
	case "leave":
		if m := w.member(f[1]); m != nil && m.running {
			m.local = append(m.local, &handover.Leave{})
		}
	case "net", "drop":
		i := arg(1)
		if i < 0 || i >= len(w.net) {
			w.failf("no message %d", i)
			return
		}
		if w.fifo {
			// per sender and recipient, in order, as over one connection
			for j := range i {
				if w.net[j].from == w.net[i].from && w.net[j].to == w.net[i].to {
					i = j
					break
				}
			}
		}
		msg := w.net[i]
		w.net = slices.Delete(w.net, i, i+1)
		if f[0] == "drop" || w.cut[msg.from] || w.cut[msg.to] {
			return // lost; a partition loses it without a dead letter
		}
		to, from := w.members[msg.to], w.members[msg.from]
		if to == nil || !to.running {
			// protoactor answers a DeadLetterResponse to the sender.
			if from != nil && from.running {
				if _, isUnreachable := msg.body.(*handover.Unreachable); !isUnreachable {
					w.net = append(w.net, netMsg{from: msg.to, to: msg.from, body: &handover.Unreachable{Member: msg.to}})
				}
			}
			return
		}
		w.step(to, msg.body)
	case "local":
		m := w.member(f[1])
		if m == nil || len(m.local) == 0 {
			w.failf("no local input for %s", f[1])
			return
		}
		in := m.local[0]
		m.local = m.local[1:]
		w.step(m, in)
	case "effect":
		i := arg(1)
		if i < 0 || i >= len(w.effects) {
			w.failf("no effect %d", i)
			return
		}
		e := w.effects[i]
		w.effects = slices.Delete(w.effects, i, i+1)
		m := w.members[e.member]
		if !m.running {
			return
		}
		if e.deactivate >= 0 {
			m.delivering[e.deactivate] = false
		}
		m.local = append(m.local, e.report)
	case "fifo":
		w.fifo = true
	case "cut": // a partition: the member's messages are lost, both ways
		if w.cut == nil {
			w.cut = map[handover.MemberID]bool{}
		}
		w.cut[handover.MemberID(f[1])] = true
	case "heal":
		delete(w.cut, handover.MemberID(f[1]))
	case "tick":
		if m := w.member(f[1]); m != nil {
			w.step(m, &handover.Tick{})
		}
	default:
		w.failf("unknown command %q", f[0])
	}
	w.checkExclusive()
}

// checkExclusive is promise 1: no two live members deliver one range.
func (w *world) checkExclusive() {
	for r := range w.ranges {
		var by []handover.MemberID
		for _, id := range w.order {
			if m := w.members[id]; m.alive && m.delivering[r] {
				by = append(by, id)
			}
		}
		if len(by) > 1 {
			w.failf("range %d delivered by %v", r, by)
		}
	}
}

// random picks the next line.
func (w *world) random(rng *rand.Rand, churn bool) string {
	for {
		switch k := rng.IntN(100); {
		case k < 32 && len(w.net) > 0:
			i := rng.IntN(len(w.net))
			if churn && rng.IntN(50) == 0 {
				return fmt.Sprintf("drop %d", i)
			}
			return fmt.Sprintf("net %d", i)
		case k < 55:
			var ready []handover.MemberID
			for _, id := range w.order {
				if len(w.members[id].local) > 0 {
					ready = append(ready, id)
				}
			}
			if len(ready) > 0 {
				return "local " + string(ready[rng.IntN(len(ready))])
			}
		case k < 72 && len(w.effects) > 0:
			return fmt.Sprintf("effect %d", rng.IntN(len(w.effects)))
		case k < 88:
			if !churn {
				continue
			}
			if run := w.runningMembers(); len(run) > 0 {
				return "tick " + string(run[rng.IntN(len(run))])
			}
		case k < 92:
			if !churn {
				continue
			}
			// the provider notices a dead member, or one that left
			for _, id := range w.order {
				if m := w.members[id]; w.provider[id] && (!m.alive || m.left) {
					return "expire " + string(id)
				}
			}
		default:
			if !churn {
				continue
			}
			run := w.runningMembers()
			switch c := rng.IntN(5); {
			case c == 3 && len(run) > 0:
				return "cut " + string(run[rng.IntN(len(run))])
			case c == 4 && len(w.cut) > 0:
				return "heal " + string(sortedCut(w.cut)[0])
			case c == 0 && len(run) < 5 || len(run) == 0:
				w.nextID++
				if rng.IntN(12) == 0 {
					// a member with other settings
					return fmt.Sprintf("start m%d %d namespace", w.nextID, w.ranges)
				}
				return fmt.Sprintf("start m%d", w.nextID)
			case c == 1 && len(run) > 1:
				return "kill " + string(run[rng.IntN(len(run))])
			case c == 2 && len(run) > 1:
				return "leave " + string(run[rng.IntN(len(run))])
			}
		}
	}
}

func (w *world) runningMembers() []handover.MemberID {
	var out []handover.MemberID
	for _, id := range w.order {
		if m := w.members[id]; m.running {
			out = append(out, id)
		}
	}
	return out
}

func sortedCut(m map[handover.MemberID]bool) []handover.MemberID {
	var out []handover.MemberID
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// quiesce heals every partition, then delivers everything, with ticks,
// until every member is settled or gone; it reports whether it got there.
func (w *world) quiesce(rng *rand.Rand) bool {
	for _, id := range sortedCut(w.cut) {
		w.exec("heal " + string(id))
	}
	for round := 0; round < 400; round++ {
		for len(w.net) > 0 || len(w.effects) > 0 || w.anyLocal() {
			w.exec(w.random(rng, false))
			if len(w.errs) > 0 {
				return false
			}
		}
		for _, id := range w.order {
			if m := w.members[id]; w.provider[id] && (!m.alive || m.left) {
				w.exec("expire " + string(id))
			}
		}
		if w.stable() {
			return true
		}
		for _, id := range w.runningMembers() {
			w.exec("tick " + string(id))
		}
	}
	return false
}

func (w *world) anyLocal() bool {
	for _, m := range w.members {
		if len(m.local) > 0 {
			return true
		}
	}
	return false
}

func (w *world) stable() bool {
	if len(w.net) > 0 || len(w.effects) > 0 || w.anyLocal() {
		return false
	}
	var view []handover.MemberID
	for i, id := range w.runningMembers() {
		st := w.members[id].core.Status()
		if !st.Settled && !st.Done {
			return false
		}
		// Members hear of each other again by their heartbeats (after a
		// partition, say): until then their views may differ.
		if st.Failed == "" && !st.Done {
			if i > 0 && view != nil && !slices.Equal(view, st.View) {
				return false
			}
			view = st.View
		}
	}
	return true
}

// checkQuiet is promise 2 once membership is stable: every range delivered
// by exactly one member, its owner in every member's view.
func (w *world) checkQuiet() {
	var run []handover.MemberID
	var view []handover.MemberID
	var field string
	for _, id := range w.runningMembers() {
		m := w.members[id]
		st := m.core.Status()
		if st.Failed != "" {
			w.failf("%s failed (%s) and still runs", id, st.Failed)
			continue
		}
		if view == nil {
			view, field = st.View, m.field
		} else if !slices.Equal(view, st.View) {
			w.failf("views differ: %v, and %v at %s", view, st.View, id)
		}
		if m.field != field {
			w.failf("members with different settings run: %s hashes on %s, another on %s", id, m.field, field)
		}
		run = append(run, id)
	}
	for _, id := range w.order {
		if m := w.members[id]; m.failed != "" {
			for r, d := range m.delivering {
				if d {
					w.failf("%s failed (%s) and delivers range %d", id, m.failed, r)
				}
			}
		}
	}
	for r := range w.ranges {
		owner := handover.Assign(view, w.ranges)[r]
		var by []handover.MemberID
		for _, id := range run {
			if w.members[id].delivering[r] {
				by = append(by, id)
			}
		}
		switch {
		case owner == "" && len(by) > 0:
			w.failf("range %d delivered by %v with no owner", r, by)
		case owner != "" && (len(by) != 1 || by[0] != owner):
			w.failf("range %d delivered by %v, owner %s", r, by, owner)
		}
	}
}

func (w *world) script() string {
	n := len(w.lines)
	if w.churn > 0 {
		n = w.churn
	}
	return strings.Join(w.lines[:n], "; ")
}

func runSeed(t *testing.T, seed int, steps int) *world {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	w := newWorld(t, 1+rng.IntN(16))
	if rng.IntN(2) == 0 {
		w.exec("fifo")
	}
	for range 1 + rng.IntN(4) {
		w.nextID++
		w.exec(fmt.Sprintf("start m%d", w.nextID))
	}
	for range steps {
		w.exec(w.random(rng, true))
		if len(w.errs) > 0 {
			return w
		}
	}
	w.churn = len(w.lines)
	if !w.quiesce(rng) && len(w.errs) == 0 {
		w.failf("no quiescence after 400 rounds:\n%s", w.dump())
	}
	if len(w.errs) == 0 {
		w.checkQuiet()
	}
	return w
}

// dump describes every running member's state.
func (w *world) dump() string {
	var b strings.Builder
	for _, id := range w.order {
		m := w.members[id]
		if !m.running {
			fmt.Fprintf(&b, "%s: alive=%v left=%v registered=%v\n", id, m.alive, m.left, w.provider[id])
			continue
		}
		st := m.core.Status()
		fmt.Fprintf(&b, "%s: view=%v discovering=%v leaving=%v settled=%v failed=%q registered=%v\n", id, st.View, st.Discovering, st.Leaving, st.Settled, st.Failed, w.provider[id])
		for r, rs := range st.Ranges {
			fmt.Fprintf(&b, "   r%d %s e%d owner=%s delivering=%v\n", r, rs.State, rs.Epoch, rs.Owner, m.delivering[r])
		}
	}
	return b.String()
}

func TestRandom(t *testing.T) {
	seeds := *simSeeds
	if testing.Short() || raceEnabled {
		seeds = min(seeds, 300)
	}
	failed := 0
	for seed := *simSeed; seed < *simSeed+seeds; seed++ {
		w := runSeed(t, seed, *simSteps)
		if len(w.errs) > 0 {
			failed++
			t.Errorf("seed %d (ranges %d): %s\nreplay: go test ./shard/handover -run TestReplay -handover.script '%s'", seed, w.ranges, strings.Join(w.errs, "\n"), "ranges "+strconv.Itoa(w.ranges)+"; "+w.script())
			if failed >= 3 {
				return
			}
		}
	}
}

// TestReplay runs -handover.script: a first line "ranges N", then the lines
// of a failing run, then quiescence and promise 2.
func TestReplay(t *testing.T) {
	if *simScript == "" {
		t.Skip("no -handover.script")
	}
	text := *simScript
	if b, err := os.ReadFile(text); err == nil {
		text = string(b)
	}
	w := runScript(t, text)
	if len(w.errs) > 0 {
		t.Fatal(strings.Join(w.errs, "\n"))
	}
}

func runScript(t *testing.T, text string) *world {
	lines := strings.FieldsFunc(text, func(r rune) bool { return r == ';' || r == '\n' })
	w := newWorld(t, 16)
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if f := strings.Fields(l); f[0] == "ranges" {
			w.ranges, _ = strconv.Atoi(f[1])
			continue
		}
		w.exec(l)
		if len(w.errs) > 0 {
			return w
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	if !w.quiesce(rng) && len(w.errs) == 0 {
		w.failf("no quiescence:\n%s", w.dump())
	}
	if len(w.errs) == 0 {
		w.checkQuiet()
	}
	return w
}
