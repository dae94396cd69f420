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
	"time"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/stage"
)

// The simulator runs the cores of several member processes in one
// goroutine, with everything around them modelled as steps that a script
// (or a seeded random generator) orders:
//
//   - a network that delivers, reorders, loses, duplicates and bounces
//     their messages (a dead letter from a live member, as protoactor
//     answers while a connection is not established), and partitions that
//     cut a member off from the others but not from the API server;
//   - a provider (the cluster's membership) whose view reaches each member
//     late, that drops members whose keep-alive lapsed, live ones included,
//     and that never shows a member its own removal, while each cluster
//     blocks a node it saw leave for good (protoactor's behaviour);
//   - an API server holding the members' leases and the range records,
//     with resourceVersions, preconditions (a claim writes a record only
//     at the generation it names), and requests that complete late, fail,
//     or fail after being applied; each member's watch of them lags;
//   - clocks: a global time that advances, and each process's monotonic
//     clock running at its own rate (within 2 %), which keeps running while
//     the process is paused;
//   - processes that pause and resume with stale state, crash, leave,
//     restart at the same address, and rejoin as a new incarnation (a new
//     cluster node) when fenced.
//
// After every step no range may be callable by two members: a member can
// call a range's handlers when its process runs (not paused), its shell
// delivers the range, and its clock is before the validity its core set.
// At quiescence (partitions healed, paused processes resumed, every
// message delivered) every range must be delivered by exactly its owner,
// on which all members agree. The same seed always gives the same script.

var (
	simSeeds  = flag.Int("handover.seeds", 1000, "random runs")
	simSeed   = flag.Int("handover.seed", 1, "first seed")
	simSteps  = flag.Int("handover.steps", 1500, "steps of churn per run")
	simScript = flag.String("handover.script", "", "replay a script (a file, or lines separated by ';')")
	simTrace  = flag.String("handover.trace", "", "with -handover.script: write every step's inputs and outputs to this file")
)

// Timings of the simulated members (milliseconds of their clocks).
const (
	simTick          = 200 * time.Millisecond
	simLeaseDuration = 2 * time.Second
	simRenewDeadline = 1500 * time.Millisecond
	simRetryPeriod   = 500 * time.Millisecond
	simLeaveTicks    = 60 // a graceful leave's bound, in ticks
	// simCall is how long a handler call may take, on its process's
	// clock: one that began before the member's claim lapsed, or before it
	// was fenced, may still run that long. LeaseDuration − RenewDeadline
	// must cover it and the clocks' rate difference.
	simCall         = 300 * time.Millisecond
	maxQuiesceSteps = 200000
)

// node is a process: one cluster member (a protoactor node) at an address,
// running one incarnation of the group member at a time.
type node struct {
	id      handover.NodeID
	addr    string
	alive   bool
	paused  bool
	startMS int64 // global time of the process's start
	rate    int64 // its clock's rate, per mille
	// blocked are the nodes this node's cluster saw leave: it never shows
	// them again (protoactor's block list).
	blocked map[handover.NodeID]bool
	// shown is the last topology this node's provider watch had.
	shown  map[handover.NodeID]bool
	member *simMember // the running incarnation, nil when none
	ranges int
	field  string
}

type simMember struct {
	id         handover.MemberID
	node       *node
	core       *handover.Core
	running    bool  // its group actor runs
	local      []any // inputs waiting in its mailbox, in order
	delivering map[int]bool
	// activating: ranges whose activation (catching up, the tombstones,
	// the handlers' attachment) is under way in the shell; they are
	// delivered once it ends, unless the member stopped meanwhile.
	activating map[int]bool
	// tail: per range, until when (its clock) a handler call that was in
	// flight when the member was fenced may still run.
	tail       map[int]time.Duration
	validUntil time.Duration
	// claimed: the last validity the core set that was not 0 (a fence
	// sets 0 before it says Fenced).
	claimed time.Duration
	left    bool
	failed  string
	fenced  string
	ticked  int // the ticks its ticker has fired
	// leaving: its Leave was stepped; leaveTicks: the ticks stepped since.
	leaving    bool
	leaveTicks int
	// wrote: a write of its lease succeeded and its shell heard so (it
	// knows a version to release).
	wrote bool
	// topo: the last Topology stepped.
	topo []handover.NodeID
	// finals: per range, the token of its last release here (its final
	// position, which the record takes).
	finals map[int]uint64
}

type netMsg struct {
	from handover.MemberID
	to   handover.MemberID // as addressed: a member, or a node (no '#')
	addr string
	body handover.Input
}

// apiOp is a request in flight to the API server.
type apiOp struct {
	member *simMember
	body   any
	start  time.Duration // the requester's clock when it started
}

// effect is the work of a member's shell on range r, which reports to the
// core when it ends (nil: nothing). A member's effects on one range end
// in the order they began (the shell runs them on the range's lane).
type effect struct {
	member *simMember
	r      int
	report handover.Input
	// deactivate: the range stops being delivered when the effect
	// completes; activate: it starts being delivered.
	deactivate int
	activate   bool
	// release: the effect's RangeStopped ends a release (DeactivateRange)
	// or writes one again (ReleaseRecord): the record takes the member's
	// final position and no holder, unless the member is cut from the API
	// server; to: the release's asker (DeactivateRange.To).
	release bool
	to      handover.MemberID
}

// apiRecord is a range's record on the server: its holder ("" for none)
// and generation.
type apiRecord struct {
	holder, next handover.MemberID
	gen          uint64
}

// apiLease is a Lease on the server; holder "": a tombstone, or released
// (by its holder or a revoker: then released is set).
type apiLease struct {
	holder   handover.MemberID
	version  int64
	released bool
}

type world struct {
	t testing.TB
	// coreTime, when set, adds up the time the members' cores take.
	coreTime *time.Duration
	ranges   int
	nodes    map[handover.NodeID]*node
	order    []handover.NodeID
	members  []*simMember // every incarnation, in start order
	// registered: the provider's registrations (etcd keys).
	registered map[handover.NodeID]bool
	net        []netMsg
	effects    []effect
	api        []apiOp
	leases     map[handover.MemberID]*apiLease
	rv         int64
	nowMS      int64
	seq        int // incarnation numbers
	names      int // node names the generator made
	lines      []string
	trace      func(string)
	fifo       bool
	// lateClaims: a claim's outcome reaches the member as an effect of its
	// own, after any later local input (the records watch's snapshot);
	// claimSeq numbers them (each its own lane).
	lateClaims bool
	claimSeq   int
	// quietWatches: a range synced from a deliverer reports RangeLive
	// later, as its own effect, in one start out of two (odd epochs).
	quietWatches bool
	cut          map[handover.NodeID]bool
	apiCut       map[handover.NodeID]bool // nodes cut from the API server
	// deaf: nodes the others' messages cannot reach (a bad advertised
	// address): each bounces; their own messages go out.
	deaf map[handover.NodeID]bool
	// The generator's plans (not needed to replay a script): when a pause,
	// a partition or an API cut may end.
	until map[string]int64
	moves []move
	errs  []string
	// handovers: the tokens a range was activated with, in order.
	tokens map[int][]uint64
	// maxMoves is the members' MaxMoves (a script line sets it).
	maxMoves int
	// call is how long a handler call may take (simCall; a script line
	// sets it).
	call time.Duration
	// starts are the StartRange effects, in order.
	starts []start
	// gentle: the generator injects no fault that loses state (no kill,
	// pause, cut, expiry of a live node, lost or bounced message, failed
	// lease write): only joins, graceful leaves, reordered and duplicated
	// messages and lagging views. Every activation then resumes from the
	// previous deliverer's final position (checkResumes).
	gentle bool
	// record: each range's record in the API server, the token of the
	// final position it holds (the newest written): the shell writes it
	// at a release, before it reports RangeStopped, unless the member is
	// cut from the API server; recs: each record's holder and generation.
	record map[int]uint64
	recs   map[int]*apiRecord
	// handed: for a range, the tokens whose activation resumed from the
	// previous deliverer's final position (the range's record's);
	// deliverer: the member of each range's last activation.
	handed    map[int]map[uint64]bool
	deliverer map[int]handover.MemberID
	// unclean: a member was fenced or failed; its positions may be lost.
	unclean bool
	// unleasing: the generator also deletes running members' leases
	// (live, released or tombstones), as someone outside the group would
	// (kubectl delete lease).
	unleasing bool
	// hiding: the generator also hides running members (hide): the member
	// is cut from the API server and the other members, its lease is
	// deleted, the provider drops it and a new member starts at once, which
	// sees neither its lease nor it in the topology.
	hiding bool
}

// start is a StartRange: the member, the range, and the holder it named
// ("" for none: a cold start, which lists).
type start struct {
	member handover.MemberID
	r      int
	from   handover.MemberID
	why    string
}

// move is an activation: of range r by to, after from's delivery ("" for
// none); resumed: from the final position of the delivery before.
type move struct {
	r        int
	from, to handover.MemberID
	resumed  bool
}

func newWorld(t testing.TB, ranges int) *world {
	return &world{t: t, ranges: ranges, nodes: map[handover.NodeID]*node{}, registered: map[handover.NodeID]bool{},
		leases: map[handover.MemberID]*apiLease{}, cut: map[handover.NodeID]bool{}, apiCut: map[handover.NodeID]bool{}, deaf: map[handover.NodeID]bool{},
		until: map[string]int64{}, tokens: map[int][]uint64{}, handed: map[int]map[uint64]bool{}, deliverer: map[int]handover.MemberID{}, record: map[int]uint64{}, recs: map[int]*apiRecord{}, call: simCall}
}

func (w *world) failf(format string, args ...any) {
	w.errs = append(w.errs, fmt.Sprintf("after %q: ", w.lines[len(w.lines)-1])+fmt.Sprintf(format, args...))
}

// clock is node n's monotonic clock now.
func (w *world) clock(n *node) time.Duration {
	return time.Duration((w.nowMS-n.startMS)*n.rate/1000) * time.Millisecond
}

func (w *world) sortedNodes() []*node {
	out := make([]*node, 0, len(w.order))
	for _, id := range w.order {
		out = append(out, w.nodes[id])
	}
	return out
}

// topologyOf is what node n's provider watch shows it now: the registered
// nodes (itself always, as the etcd provider never shows a node its own
// removal), minus those its cluster blocked. Nodes that were shown and are
// gone now are blocked for good.
func (w *world) topologyOf(n *node) *handover.Topology {
	now := map[handover.NodeID]bool{}
	for _, id := range w.order {
		if (w.registered[id] || id == n.id) && !n.blocked[id] {
			now[id] = true
		}
	}
	for id := range n.shown {
		if !now[id] {
			n.blocked[id] = true
		}
	}
	n.shown = now
	t := &handover.Topology{}
	for _, id := range w.order {
		if now[id] {
			t.Nodes = append(t.Nodes, id)
		}
	}
	return t
}

func (w *world) step(m *simMember, in handover.Input) {
	if !m.running || !m.node.alive {
		return
	}
	switch in := in.(type) {
	case *handover.Topology:
		m.topo = in.Nodes
	case *handover.Leave:
		m.leaving = true
	case *handover.Tick:
		if m.leaving {
			m.leaveTicks++
		}
	}
	var began time.Time
	if w.coreTime != nil {
		began = time.Now()
	}
	out := m.core.Step(in)
	if w.coreTime != nil {
		*w.coreTime += time.Since(began)
	}
	if w.trace != nil {
		w.trace(fmt.Sprintf("%s <- %T%+v", m.id, in, in))
		for _, msg := range out {
			w.trace(fmt.Sprintf("   -> %v %T%+v", msg.To, msg.Body, msg.Body))
		}
	}
	for _, msg := range out {
		switch msg.To.Kind {
		case handover.Member:
			to := m.core.Member(msg.To.ID)
			w.net = append(w.net, netMsg{from: m.id, to: to, addr: w.addrOf(to), body: msg.Body.(handover.Input)})
		case handover.Ranges:
			w.rangeEffect(m, msg.Body)
		case handover.Lease:
			w.leaseEffect(m, msg.Body)
		default:
			w.failf("%s sent to %v", m.id, msg.To)
		}
	}
}

// addrOf resolves a member's address as a shell does: its node's.
func (w *world) addrOf(id handover.MemberID) string {
	if n := w.nodes[id.Node()]; n != nil {
		return n.addr
	}
	return ""
}

func (w *world) rangeEffect(m *simMember, body any) {
	switch e := body.(type) {
	case *handover.StartRange:
		w.starts = append(w.starts, start{member: m.id, r: e.Range, from: e.From, why: e.Cold})
		quiet := w.quietWatches && e.From != "" && e.Epoch%2 == 1
		w.effects = append(w.effects, effect{member: m, r: e.Range, report: &handover.RangeSynced{Range: e.Range, Epoch: e.Epoch, Live: !quiet}, deactivate: -1})
		if quiet {
			// The watch's first event comes on a path of its own: before
			// or after the sync's report.
			w.effects = append(w.effects, effect{member: m, r: liveLane - e.Range, report: &handover.RangeLive{Range: e.Range, Epoch: e.Epoch}, deactivate: -1})
		}
	case *handover.ActivateRange:
		if m.delivering[e.Range] || m.activating[e.Range] {
			w.failf("%s activates range %d, which it delivers already", m.id, e.Range)
		}
		if toks := w.tokens[e.Range]; len(toks) > 0 && e.Token <= toks[len(toks)-1] {
			w.failf("%s activates range %d with token %d, not above the last one %d", m.id, e.Range, e.Token, toks[len(toks)-1])
		}
		// The shell resumes from the record's position (and the leases',
		// which the simulator leaves out).
		last := w.lastToken(e.Range)
		resumed := last != 0 && w.record[e.Range] == last
		if prev := w.deliverer[e.Range]; !resumed && last != 0 && w.liveHolder(prev) {
			// Only a void lease lets a range go without its deliverer's
			// answer, and that answer comes once the release's write has
			// landed.
			w.failf("%s activates range %d without the final position of %s, whose lease is live", m.id, e.Range, prev)
		}
		if resumed {
			if w.handed[e.Range] == nil {
				w.handed[e.Range] = map[uint64]bool{}
			}
			w.handed[e.Range][e.Token] = true
		}
		w.tokens[e.Range] = append(w.tokens[e.Range], e.Token)
		w.moves = append(w.moves, move{r: e.Range, from: w.deliverer[e.Range], to: m.id, resumed: resumed})
		w.deliverer[e.Range] = m.id
		m.activating[e.Range] = true
		w.effects = append(w.effects, effect{member: m, r: e.Range, deactivate: -1, activate: true})
	case *handover.DeactivateRange:
		if !m.delivering[e.Range] && !m.activating[e.Range] {
			w.failf("%s deactivates range %d, which it does not deliver", m.id, e.Range)
		}
		if m.finals == nil {
			m.finals = map[int]uint64{}
		}
		m.finals[e.Range] = w.lastToken(e.Range)
		w.effects = append(w.effects, effect{member: m, r: e.Range, report: &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch}, deactivate: e.Range, release: true, to: e.To})
	case *handover.ReleaseRecord:
		w.effects = append(w.effects, effect{member: m, r: e.Range, report: &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch}, deactivate: -1, release: true})
	case *handover.StopRange:
		w.effects = append(w.effects, effect{member: m, r: e.Range, report: &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch}, deactivate: -1})
	case *handover.DrainTimeUp:
		// The drain's effect ends when it ends, in time or not: the
		// simulator's releases report the position they reached either way.
	case *handover.Failed:
		m.failed = e.Reason
		w.unclean = true
	case *handover.Left:
		m.running, m.left = false, true
		for r, d := range m.delivering {
			if d {
				w.failf("%s left while it delivers range %d", m.id, r)
			}
		}
		w.api = append(w.api, apiOp{member: m, body: &releaseOwn{}})
	case *handover.Fenced:
		// The shell starts no handler call from now on; once the calls in
		// flight have ended, it releases the lease and rejoins as a new
		// incarnation on a new cluster node.
		m.running, m.fenced = false, e.Reason
		w.unclean = true
		now := w.clock(m.node)
		for r, d := range m.delivering {
			if d {
				m.tail[r] = min(now, m.claimed) + w.call
			}
		}
		clear(m.delivering)
		clear(m.activating)
		w.api = append(w.api, apiOp{member: m, body: &releaseOwn{rejoin: true}})
	default:
		w.failf("%s: unknown effect %T", m.id, body)
	}
}

// checkResumes is continuity at the switch in a gentle run: every
// activation after the first resumed from its previous deliverer's final
// position (the range's record's), so the deletes that
// deliverer's handlers missed reach the new one's.
func (w *world) checkResumes() {
	if !w.gentle || w.unclean {
		return
	}
	for r := range w.ranges {
		toks := w.tokens[r]
		for i := 1; i < len(toks); i++ {
			if !w.handed[r][toks[i]] {
				w.failf("range %d: the deliverer under token %d did not resume from the final position of token %d (tokens %v)", r, toks[i], toks[i-1], toks)
			}
		}
	}
}

// liveHolder: member id runs, unfenced, and holds its lease, neither
// released nor deleted.
func (w *world) liveHolder(id handover.MemberID) bool {
	n := w.nodes[id.Node()]
	if n == nil || n.member == nil || n.member.id != id || !n.member.running || !n.alive {
		return false
	}
	l := w.leases[id]
	return l != nil && l.holder == id && !l.released
}

func (w *world) lastToken(r int) uint64 {
	if toks := w.tokens[r]; len(toks) > 0 {
		return toks[len(toks)-1]
	}
	return 0
}

// releaseOwn is a member's shell releasing its own lease (Left, Fenced);
// rejoin: then it starts a new incarnation.
type releaseOwn struct{ rejoin bool }

func (w *world) leaseEffect(m *simMember, body any) {
	switch e := body.(type) {
	case *handover.SetValidity:
		m.validUntil = e.Until
		if e.Until > 0 {
			m.claimed = e.Until
		}
	case *handover.RenewLease, *handover.CheckLease, *handover.RevokeLease, *handover.ClaimRecords, *handover.DeleteLease:
		w.api = append(w.api, apiOp{member: m, body: e, start: w.clock(m.node)})
	default:
		w.failf("%s: unknown lease effect %T", m.id, body)
	}
}

// apply runs an API request on the server; answer says whether its
// requester hears the result (else it hears a failure, as after a
// timeout).
func (w *world) apply(op apiOp, answer bool) {
	m := op.member
	var reply handover.Input
	switch e := op.body.(type) {
	case *handover.RenewLease:
		l := w.leases[m.id]
		switch {
		case e.Create && l == nil:
			w.rv++
			w.leases[m.id] = &apiLease{holder: m.id, version: w.rv}
			reply = &handover.LeaseRenewed{Seq: e.Seq, Start: op.start, Token: uint64(w.rv)}
		case !e.Create && l != nil && l.holder == m.id:
			w.rv++
			l.version = w.rv
			reply = &handover.LeaseRenewed{Seq: e.Seq, Start: op.start, Token: uint64(w.rv)}
		default:
			reply = &handover.LeaseRenewFailed{Seq: e.Seq, Start: op.start, Lost: true}
		}
		if !answer {
			reply = &handover.LeaseRenewFailed{Seq: e.Seq, Start: op.start}
		}
		if _, ok := reply.(*handover.LeaseRenewed); ok {
			m.wrote = true
		}
	case *handover.CheckLease:
		l := w.leases[e.Member]
		if l == nil {
			w.rv++
			w.leases[e.Member] = &apiLease{version: w.rv} // a tombstone: no holder
			reply = &handover.LeaseChecked{Member: e.Member}
		} else if l.holder == "" {
			reply = &handover.LeaseChecked{Member: e.Member, Released: l.released}
		} else {
			reply = &handover.LeaseChecked{Member: e.Member, Found: true, Version: strconv.FormatInt(l.version, 10)}
		}
		if !answer {
			reply = &handover.LeaseChecked{Member: e.Member, Failed: true}
		}
	case *handover.DeleteLease:
		// Lease names are member ids here; nothing answers.
		if l := w.leases[handover.MemberID(e.Name)]; l != nil && l.holder == "" && strconv.FormatInt(l.version, 10) == e.Version {
			delete(w.leases, handover.MemberID(e.Name))
		}
		return
	case *handover.RevokeLease:
		l := w.leases[e.Member]
		ok := l != nil && l.holder != "" && strconv.FormatInt(l.version, 10) == e.Version
		if ok {
			w.rv++
			l.holder, l.released, l.version = "", true, w.rv
		}
		reply = &handover.LeaseRevoked{Member: e.Member, Version: e.Version, OK: ok && answer}
	case *handover.ClaimRecords:
		if !w.lateClaims {
			reply = w.claimRecords(m, e, answer)
			break
		}
		// The shell hands the outcome to the core on a path of its own:
		// the lease watch may show the write first.
		res := w.claimRecords(m, e, answer)
		if m.running && m.node.alive {
			w.claimSeq++
			w.effects = append(w.effects, effect{member: m, r: claimLane - w.claimSeq, report: res, deactivate: -1})
		}
		return
	case *releaseOwn:
		switch l := w.leases[m.id]; {
		case !m.wrote: // the shell knows of no write of its to release
		case l == nil: // deleted by someone: a released one takes its place
			w.rv++
			w.leases[m.id] = &apiLease{released: true, version: w.rv}
		case l.holder == m.id: // never a tombstone
			w.rv++
			l.holder, l.released, l.version = "", true, w.rv
		}
		if e.rejoin && m.node.alive {
			w.rejoin(m.node)
		}
		return
	}
	if reply != nil && m.running && m.node.alive {
		m.local = append(m.local, reply)
	}
}

// claimRecords writes the records a ClaimRecords claims, in one write:
// each only at the generation the claim names. answer: the requester
// hears the outcome (else every claim failed, as after a timeout).
func (w *world) claimRecords(m *simMember, e *handover.ClaimRecords, answer bool) *handover.RecordsClaimed {
	out := &handover.RecordsClaimed{}
	wrote := false
	for _, cl := range e.Claims {
		rec := w.recs[cl.Range]
		if rec == nil {
			rec = &apiRecord{}
			w.recs[cl.Range] = rec
		}
		res := handover.ClaimResult{Range: cl.Range, Epoch: cl.Epoch}
		if rec.gen == cl.Gen {
			if !wrote {
				w.rv++
				wrote = true
			}
			rec.holder, rec.gen = m.id, rec.gen+1
			res.OK, res.Token = true, uint64(w.rv)
		}
		res.Record = handover.RecordState{Range: cl.Range, Holder: rec.holder, Gen: rec.gen, Next: rec.next}
		if !answer {
			res = handover.ClaimResult{Range: cl.Range, Epoch: cl.Epoch}
		}
		out.Results = append(out.Results, res)
	}
	return out
}

// releaseRecord is a release's write of range r's record by member m, at
// the end of its drain: no holder, for member to, the final position of
// token tok; only while the record names m. It returns the record written
// (nil: none).
func (w *world) releaseRecord(m *simMember, r int, tok uint64, to handover.MemberID) *handover.RecordState {
	rec := w.recs[r]
	if rec == nil || rec.holder != m.id || w.apiCut[m.node.id] {
		return nil
	}
	w.rv++
	rec.holder, rec.gen, rec.next = "", rec.gen+1, to
	w.record[r] = max(w.record[r], tok)
	return &handover.RecordState{Range: r, Gen: rec.gen, Next: to}
}

// startMember starts a new incarnation on node n.
func (w *world) startMember(n *node) {
	w.seq++
	id := handover.NewMemberID(n.id, strconv.Itoa(w.seq))
	m := &simMember{id: id, node: n, running: true, delivering: map[int]bool{}, activating: map[int]bool{}, tail: map[int]time.Duration{},
		core: handover.NewCore(handover.Config{Self: id, Ranges: n.ranges, HashField: n.field, JoinedAt: w.nowMS*1000 + int64(w.seq),
			LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod, HealTicks: 20, MaxMoves: w.maxMoves, LeaveTicks: simLeaveTicks})}
	n.member = m
	w.members = append(w.members, m)
	m.local = append(m.local, w.topologyOf(n))
}

// rejoin: a fenced member's shell makes a new cluster node (a new
// protoactor member with a new id and address) and a new incarnation.
func (w *world) rejoin(old *node) {
	name := handover.NodeID(fmt.Sprintf("%s.%d", old.id, w.seq+1))
	n := w.newNode(name, old.ranges, old.field)
	old.alive = false
	old.member = nil
	delete(w.registered, old.id)
	w.startMember(n)
}

func (w *world) newNode(id handover.NodeID, ranges int, field string) *node {
	n := &node{id: id, addr: "addr-" + string(id), alive: true, startMS: w.nowMS, rate: 1000,
		blocked: map[handover.NodeID]bool{}, shown: map[handover.NodeID]bool{}, ranges: ranges, field: field}
	// Clocks run at their own rates, within 2 %, fixed by the name so that
	// scripts replay alike.
	h := int64(0)
	for _, b := range []byte(id) {
		h = h*31 + int64(b)
	}
	n.rate = 980 + (h%41+41)%41
	w.nodes[id] = n
	w.order = append(w.order, id)
	w.registered[id] = true
	return n
}

func (w *world) node(name string) *node {
	n := w.nodes[handover.NodeID(name)]
	if n == nil {
		w.failf("no node %s", name)
	}
	return n
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
	pick := func(list int) int {
		i := arg(1)
		if i < 0 || i >= list {
			w.failf("no item %d of %d", i, list)
			return -1
		}
		return i
	}
	switch f[0] {
	case "start": // start NODE [RANGES FIELD]
		ranges, field := w.ranges, "uid"
		if len(f) >= 4 {
			ranges, field = arg(2), f[3]
		}
		if w.nodes[handover.NodeID(f[1])] != nil {
			w.failf("node %s exists", f[1])
			return
		}
		w.startMember(w.newNode(handover.NodeID(f[1]), ranges, field))
	case "restart": // restart NODE NEW: the process dies; a new one (a new node id) starts at its address
		old := w.node(f[1])
		if old == nil || len(f) < 3 {
			return
		}
		w.crash(old)
		n := w.newNode(handover.NodeID(f[2]), old.ranges, old.field)
		n.addr = old.addr
		w.startMember(n)
	case "kill": // the process dies: its handlers' calls end now
		if n := w.node(f[1]); n != nil {
			w.crash(n)
		}
	case "pause":
		if n := w.node(f[1]); n != nil {
			n.paused = true
		}
	case "resume":
		if n := w.node(f[1]); n != nil {
			n.paused = false
		}
	case "expire": // the provider drops the node (a dead process, or a live one whose keep-alive lapsed)
		delete(w.registered, handover.NodeID(f[1]))
	case "register": // a live node's keep-alive registers it again
		if n := w.node(f[1]); n != nil && n.alive && !n.paused && n.member != nil {
			w.registered[n.id] = true
		}
	case "topo": // a node's provider watch shows it the topology
		if n := w.node(f[1]); n != nil && n.alive && n.member != nil {
			n.member.local = append(n.member.local, w.topologyOf(n))
		}
	case "leases": // a member's lease watch catches up with the server (it reaches the member later, in order)
		if n := w.node(f[1]); n != nil && n.alive && n.member != nil {
			snap := &handover.Leases{}
			for _, id := range sortedMembers(w.leases) {
				if l := w.leases[id]; l.holder == "" {
					if l.released {
						snap.Released = append(snap.Released, id)
					}
					snap.Stale = append(snap.Stale, handover.StaleLease{Name: string(id), Version: strconv.FormatInt(l.version, 10)})
					continue
				}
				snap.Leases = append(snap.Leases, handover.LeaseRecord{Holder: id, Version: strconv.FormatInt(w.leases[id].version, 10)})
			}
			for r := range w.ranges {
				if rec := w.recs[r]; rec != nil && rec.gen > 0 {
					snap.Records = append(snap.Records, handover.RecordState{Range: r, Holder: rec.holder, Gen: rec.gen, Next: rec.next})
				}
			}
			n.member.local = append(n.member.local, snap)
		}
	case "leave":
		if n := w.node(f[1]); n != nil && n.member != nil {
			n.member.local = append(n.member.local, &handover.Leave{})
		}
	case "net", "drop", "dup", "bounce":
		i := pick(len(w.net))
		if i < 0 {
			return
		}
		if w.fifo && f[0] == "net" {
			for j := range i { // per sender and address, in order, as over one connection
				if w.net[j].from == w.net[i].from && w.net[j].addr == w.net[i].addr {
					i = j
					break
				}
			}
		}
		msg := w.net[i]
		switch f[0] {
		case "dup":
			w.net = append(w.net, msg)
			return
		case "drop":
			w.net = slices.Delete(w.net, i, i+1)
			return
		case "bounce": // a dead letter from a live member: no connection yet
			w.net = slices.Delete(w.net, i, i+1)
			if _, isU := msg.body.(*handover.Undeliverable); !isU {
				w.net = append(w.net, netMsg{from: msg.to, to: msg.from, addr: w.addrOf(msg.from), body: &handover.Undeliverable{Member: msg.to}})
			}
			return
		}
		to := w.receiver(msg.addr)
		if to != nil && to.node.paused {
			return // held in the network until the process runs again
		}
		w.net = slices.Delete(w.net, i, i+1)
		fromNode := w.nodes[msg.from.Node()]
		if fromNode != nil && (w.cut[fromNode.id] || to != nil && w.cut[to.node.id]) {
			return // lost in a partition
		}
		if to == nil || fromNode != nil && fromNode != to.node && w.deaf[to.node.id] {
			// protoactor answers a DeadLetterResponse to the sender.
			if _, isU := msg.body.(*handover.Undeliverable); !isU {
				w.net = append(w.net, netMsg{from: msg.to, to: msg.from, addr: w.addrOf(msg.from), body: &handover.Undeliverable{Member: msg.to}})
			}
			return
		}
		if strings.Contains(string(msg.to), "#") && msg.to != to.id {
			return // for another incarnation at that address: the shell drops it
		}
		w.step(to, msg.body)
	case "local":
		n := w.node(f[1])
		if n == nil || n.member == nil || len(n.member.local) == 0 || n.paused {
			w.failf("no local input for %s", f[1])
			return
		}
		m := n.member
		in := m.local[0]
		m.local = m.local[1:]
		switch x := in.(type) {
		case *handover.Leases:
			x.Now = w.clock(n)
		case *handover.Tick:
			x.Now = w.clock(n)
		case *handover.LeaseRenewed:
			x.Now = w.clock(n)
		case *handover.RecordsClaimed:
			x.Now = w.clock(n)
		}
		w.step(m, in.(handover.Input))
	case "effect":
		i := pick(len(w.effects))
		if i < 0 {
			return
		}
		i = w.firstEffect(i)
		e := w.effects[i]
		w.effects = slices.Delete(w.effects, i, i+1)
		m := e.member
		if !m.running || !m.node.alive {
			return
		}
		if e.activate {
			if m.activating[e.r] {
				delete(m.activating, e.r)
				m.delivering[e.r] = true
			}
			return
		}
		if e.deactivate >= 0 {
			m.delivering[e.deactivate] = false
		}
		if rs, ok := e.report.(*handover.RangeStopped); ok && e.release {
			// The record takes the final position and no holder.
			rs.Record = w.releaseRecord(m, rs.Range, m.finals[rs.Range], e.to)
			rs.Unrecorded = rs.Record == nil && w.recs[rs.Range] != nil && w.recs[rs.Range].holder == m.id
		}
		m.local = append(m.local, e.report)
	case "api", "apifail", "apilate":
		i := pick(len(w.api))
		if i < 0 {
			return
		}
		op := w.api[i]
		if !w.ready(op) {
			return
		}
		w.api = slices.Delete(w.api, i, i+1)
		if w.apiCut[op.member.node.id] {
			f[0] = "apifail"
		}
		switch f[0] {
		case "api":
			w.apply(op, true)
		case "apilate": // applied, but the answer is lost: the requester sees a failure
			w.apply(op, false)
		case "apifail": // never reached the server
			switch e := op.body.(type) {
			case *handover.RenewLease:
				if op.member.running {
					op.member.local = append(op.member.local, &handover.LeaseRenewFailed{Seq: e.Seq, Start: op.start})
				}
			case *handover.RevokeLease:
				if op.member.running {
					op.member.local = append(op.member.local, &handover.LeaseRevoked{Member: e.Member, Version: e.Version})
				}
			case *handover.CheckLease:
				if op.member.running {
					op.member.local = append(op.member.local, &handover.LeaseChecked{Member: e.Member, Failed: true})
				}
			case *handover.ClaimRecords:
				if op.member.running {
					failed := &handover.RecordsClaimed{}
					for _, cl := range e.Claims {
						failed.Results = append(failed.Results, handover.ClaimResult{Range: cl.Range, Epoch: cl.Epoch})
					}
					op.member.local = append(op.member.local, failed)
				}
			default:
				w.api = append(w.api, op) // the shell's own deletes are retried
			}
		}
	case "tick":
		if n := w.node(f[1]); n != nil && n.member != nil && n.alive && !n.paused {
			n.member.local = append(n.member.local, &handover.Tick{})
		}
	case "advance": // time passes; each running process's ticker fires on its own clock
		ms := arg(1)
		if ms > 0 {
			w.nowMS += int64(ms)
		}
		for _, n := range w.sortedNodes() {
			if m := n.member; m != nil && m.running && n.alive && !n.paused {
				if k := int(w.clock(n) / simTick); k > m.ticked {
					m.ticked = k
					m.local = append(m.local, &handover.Tick{})
				}
			}
		}
	case "fifo":
		w.fifo = true
	case "quietwatches": // a synced range's watch sends its first event later
		w.quietWatches = true
	case "lateclaims": // a claim's outcome may come after the records watch shows it
		w.lateClaims = true
	case "gentle":
		w.gentle = true
	case "maxmoves": // the members started from now on bound their moves
		w.maxMoves = arg(1)
	case "call": // handler calls take up to MS
		w.call = time.Duration(arg(1)) * time.Millisecond
	case "cut": // a partition from the other members, not from the API server or the provider
		w.cut[handover.NodeID(f[1])] = true
	case "heal":
		delete(w.cut, handover.NodeID(f[1]))
	case "deaf": // the others' messages cannot reach the node (a bad advertised address)
		w.deaf[handover.NodeID(f[1])] = true
	case "hear":
		delete(w.deaf, handover.NodeID(f[1]))
	case "apicut": // the node cannot reach the API server
		w.apiCut[handover.NodeID(f[1])] = true
	case "apiheal":
		delete(w.apiCut, handover.NodeID(f[1]))
	case "unlease": // someone outside the group deletes the member's lease on the server, live or released
		if n := w.node(f[1]); n != nil && n.member != nil && w.leases[n.member.id] != nil {
			w.rv++
			delete(w.leases, n.member.id)
		}
	case "hide": // hide NODE NEW: cut NODE from the API server and the members, unlease and expire it, start NEW, at once
		if len(f) < 3 || w.nodes[handover.NodeID(f[2])] != nil {
			return
		}
		if n := w.node(f[1]); n != nil && n.member != nil && w.leases[n.member.id] != nil {
			w.rv++
			delete(w.leases, n.member.id)
		}
		delete(w.registered, handover.NodeID(f[1]))
		w.apiCut[handover.NodeID(f[1])] = true
		w.cut[handover.NodeID(f[1])] = true
		w.startMember(w.newNode(handover.NodeID(f[2]), w.ranges, "uid"))
	default:
		w.failf("unknown command %q", f[0])
	}
	w.checkExclusive()
}

// receiver is the member running at an address, nil when none.
func (w *world) receiver(addr string) *simMember {
	for _, n := range w.sortedNodes() {
		if n.addr == addr && n.alive && n.member != nil && n.member.running {
			return n.member
		}
	}
	return nil
}

// firstEffect is the effect that ends when effect i is picked: the first
// of its member's on its range.
// The lanes of the effects that end in no order with a range's others:
// a range's live report (liveLane - range) and each claim's outcome
// (claimLane - its number, one lane each).
const (
	liveLane  = -1
	claimLane = -1 << 20
)

func (w *world) firstEffect(i int) int {
	e := w.effects[i]
	return slices.IndexFunc(w.effects[:i+1], func(o effect) bool { return o.member == e.member && o.r == e.r })
}

// ready: op can reach the API server now. A fenced member's release of
// its lease waits until the handler calls in flight have ended.
func (w *world) ready(op apiOp) bool {
	if _, rel := op.body.(*releaseOwn); !rel {
		return true
	}
	now := w.clock(op.member.node)
	for _, t := range op.member.tail {
		if now < t {
			return false
		}
	}
	return true
}

func (w *world) crash(n *node) {
	n.alive, n.paused = false, false
	if m := n.member; m != nil {
		m.running = false
		clear(m.delivering)
		clear(m.activating)
		clear(m.tail)
		m.local = nil
	}
}

// callers are the members that can be in a call of range r's handlers
// now: one may start until the member's claim lapses and run for w.call
// (on its process's clock; a process paused mid-call is the fencing
// tokens' case, not the protocol's), and one in flight when the member
// was fenced ends by its tail.
func (w *world) callers(r int) []handover.MemberID {
	var by []handover.MemberID
	for _, m := range w.members {
		n := m.node
		if !n.alive || n.paused {
			continue
		}
		now := w.clock(n)
		if m.running && m.delivering[r] && now < m.validUntil+w.call || now < m.tail[r] {
			by = append(by, m.id)
		}
	}
	return by
}

// checkExclusive is promise 1: no two members can call a range's handlers
// at the same time.
func (w *world) checkExclusive() {
	for r := range w.ranges {
		if by := w.callers(r); len(by) > 1 {
			w.failf("range %d can be called by %v", r, by)
		}
	}
}

// random picks the next line: with churn, any; without, only what
// delivers what is in flight (messages, inputs, effects, requests).
func (w *world) random(rng *rand.Rand, churn bool) string {
	for {
		if !churn && !w.busy() {
			return "advance 0"
		}
		switch k := rng.IntN(1000); {
		case k < 300 && len(w.net) > 0:
			i := rng.IntN(len(w.net))
			if to := w.receiver(w.net[i].addr); !churn && to != nil && to.node.paused {
				continue
			}
			if churn && !w.gentle {
				switch rng.IntN(40) {
				case 0:
					return fmt.Sprintf("drop %d", i)
				case 1, 2:
					return fmt.Sprintf("dup %d", i)
				case 3, 4:
					return fmt.Sprintf("bounce %d", i)
				}
			}
			return fmt.Sprintf("net %d", i)
		case k < 560:
			var ready []*node
			for _, n := range w.sortedNodes() {
				if n.alive && !n.paused && n.member != nil && len(n.member.local) > 0 {
					ready = append(ready, n)
				}
			}
			if len(ready) > 0 {
				return "local " + string(ready[rng.IntN(len(ready))].id)
			}
		case k < 650 && len(w.effects) > 0:
			return fmt.Sprintf("effect %d", rng.IntN(len(w.effects)))
		case k < 760 && len(w.api) > 0:
			i := rng.IntN(len(w.api))
			if !churn && w.apiCut[w.api[i].member.node.id] || !w.ready(w.api[i]) {
				continue
			}
			if churn && !w.gentle {
				switch rng.IntN(40) {
				case 0:
					return fmt.Sprintf("apifail %d", i)
				case 1:
					return fmt.Sprintf("apilate %d", i)
				}
			}
			return fmt.Sprintf("api %d", i)
		case k < 850:
			if !churn {
				continue
			}
			if run := w.runningNodes(); len(run) > 0 {
				n := run[rng.IntN(len(run))]
				if rng.IntN(2) == 0 {
					return "topo " + string(n.id)
				}
				if w.nowMS < w.until["leasestall "+string(n.id)] {
					continue // its lease watch lags
				}
				return "leases " + string(n.id)
			}
		case k < 910:
			if !churn {
				continue
			}
			return "advance 100"
		case k < 950:
			if !churn {
				continue
			}
			if line := w.endFault(); line != "" {
				return line
			}
			// the provider notices a dead member, or one that left
			for _, n := range w.sortedNodes() {
				if w.registered[n.id] && (!n.alive || n.member == nil || n.member.left) {
					return "expire " + string(n.id)
				}
			}
		case k >= 985:
			if !churn {
				continue
			}
			if line := w.randomFault(rng); line != "" {
				return line
			}
		}
	}
}

// randomFault picks a fault, or the end of one whose time is up.
func (w *world) randomFault(rng *rand.Rand) string {
	run := w.runningNodes()
	plan := func(key string, min, max int) {
		w.until[key] = w.nowMS + int64(min+rng.IntN(max-min))
	}
	if w.unleasing && len(run) > 0 && rng.IntN(8) == 0 {
		return "unlease " + string(run[rng.IntN(len(run))].id)
	}
	if w.hiding && len(run) > 0 && len(run) < 5 && rng.IntN(6) == 0 {
		n := run[rng.IntN(len(run))]
		plan("apicut "+string(n.id), 200, 3000)
		plan("cut "+string(n.id), 200, 3000)
		w.names++
		return fmt.Sprintf("hide %s n%d", n.id, w.names)
	}
	c := rng.IntN(10)
	if w.gentle && c != 0 && c != 2 && c != 7 && c != 9 {
		return "" // only joins, leaves, registrations and lagging views
	}
	switch {
	case c == 9 && len(run) > 0:
		// a member's watch of the leases lags (the line only marks it)
		n := run[rng.IntN(len(run))]
		plan("leasestall "+string(n.id), 500, 4000)
		return "advance 0"
	case c == 0 && len(run) < 5 || len(run) == 0:
		w.names++
		name := fmt.Sprintf("n%d", w.names)
		if rng.IntN(12) == 0 {
			return fmt.Sprintf("start %s %d namespace", name, w.ranges) // other settings
		}
		return "start " + name
	case c == 1 && len(run) > 1:
		return "kill " + string(run[rng.IntN(len(run))].id)
	case c == 2 && len(run) > 1:
		return "leave " + string(run[rng.IntN(len(run))].id)
	case c == 3 && len(run) > 1:
		n := run[rng.IntN(len(run))]
		if !w.cut[n.id] {
			plan("cut "+string(n.id), 200, 5000)
			return "cut " + string(n.id)
		}
	case c == 4 && len(run) > 1:
		n := run[rng.IntN(len(run))]
		if !n.paused {
			plan("pause "+string(n.id), 200, 6000)
			return "pause " + string(n.id)
		}
	case c == 5 && len(run) > 0:
		n := run[rng.IntN(len(run))]
		if !w.apiCut[n.id] {
			plan("apicut "+string(n.id), 200, 5000)
			return "apicut " + string(n.id)
		}
	case c == 6 && len(run) > 0:
		// the provider drops a live node (its keep-alive lapsed)
		return "expire " + string(run[rng.IntN(len(run))].id)
	case c == 7:
		for _, n := range w.sortedNodes() {
			if n.alive && !n.paused && n.member != nil && !w.registered[n.id] {
				return "register " + string(n.id)
			}
		}
	case c == 8 && len(run) > 1:
		n := run[rng.IntN(len(run))]
		w.names++
		return fmt.Sprintf("restart %s n%d", n.id, w.names)
	}
	return ""
}

// endFault ends a fault whose time is up.
func (w *world) endFault() string {
	for _, n := range w.sortedNodes() {
		switch {
		case n.paused && w.nowMS >= w.until["pause "+string(n.id)]:
			return "resume " + string(n.id)
		case w.cut[n.id] && w.nowMS >= w.until["cut "+string(n.id)]:
			return "heal " + string(n.id)
		case w.apiCut[n.id] && w.nowMS >= w.until["apicut "+string(n.id)]:
			return "apiheal " + string(n.id)
		}
	}
	return ""
}

func (w *world) runningNodes() []*node {
	var out []*node
	for _, n := range w.sortedNodes() {
		if n.alive && n.member != nil && n.member.running {
			out = append(out, n)
		}
	}
	return out
}

// quiesce heals every partition, resumes every paused process and lets the
// provider register every live node and drop every dead one, then delivers
// everything, advancing time with ticks, until every member is settled or
// gone. It reports whether it got there; a livelock fails it.
func (w *world) quiesce(rng *rand.Rand) bool {
	for _, id := range sortedKeys(w.cut) {
		w.exec("heal " + string(id))
	}
	for _, id := range sortedKeys(w.apiCut) {
		w.exec("apiheal " + string(id))
	}
	for _, n := range w.sortedNodes() {
		if n.paused {
			w.exec("resume " + string(n.id))
		}
	}
	steps := 0
	for round := 0; round < 400; round++ {
		for w.busy() {
			w.exec(w.random(rng, false))
			if len(w.errs) > 0 {
				return false
			}
			if steps++; steps > maxQuiesceSteps {
				w.failf("livelock: still busy after %d steps:\n%s", steps, w.dump())
				return false
			}
		}
		for _, n := range w.sortedNodes() {
			switch {
			case w.registered[n.id] && (!n.alive || n.member == nil || n.member.left):
				w.exec("expire " + string(n.id))
			case !w.registered[n.id] && n.alive && n.member != nil && n.member.running:
				w.exec("register " + string(n.id))
			}
		}
		if w.stable() {
			return true
		}
		w.exec("advance 200")
		for _, n := range w.runningNodes() {
			w.exec("topo " + string(n.id))
			w.exec("leases " + string(n.id))
		}
	}
	return false
}

// busy: something in flight can be delivered now: a message to a process
// that runs, an effect, a request of a process that reaches the API
// server, an input of a process that runs.
func (w *world) busy() bool {
	for _, m := range w.net {
		if to := w.receiver(m.addr); to == nil || !to.node.paused {
			return true
		}
	}
	for _, op := range w.api {
		if !w.apiCut[op.member.node.id] && w.ready(op) {
			return true
		}
	}
	return len(w.effects) > 0 || w.anyLocal()
}

func (w *world) anyLocal() bool {
	for _, n := range w.sortedNodes() {
		if n.alive && !n.paused && n.member != nil && len(n.member.local) > 0 {
			return true
		}
	}
	return false
}

func (w *world) stable() bool {
	if w.busy() {
		return false
	}
	var view, owners []handover.MemberID
	for _, n := range w.runningNodes() {
		st := n.member.core.Status()
		if !st.Settled && !st.Done || st.Leaving && !st.Done {
			return false // still settling, or still leaving
		}
		if st.Failed == "" && !st.Done {
			if view != nil && !slices.Equal(view, st.View) {
				return false
			}
			view = st.View
			got := make([]handover.MemberID, len(st.Ranges))
			for r, rs := range st.Ranges {
				got[r] = rs.Owner
			}
			// Members agree on the owners once their heartbeats have told
			// each other what they deliver.
			if owners != nil && !slices.Equal(owners, got) {
				return false
			}
			owners = got
		}
	}
	for _, m := range w.members {
		for _, t := range m.tail {
			if m.node.alive && w.clock(m.node) < t {
				return false // a fenced member's call may still run
			}
		}
	}
	for r := range w.ranges {
		if len(w.callers(r)) != 1 && view != nil {
			return false
		}
	}
	return true
}

// checkQuiet is promise 2 once membership is stable: every range delivered
// by exactly one member, its owner in every member's view.
func (w *world) checkQuiet() {
	var run []*simMember
	var view []handover.MemberID
	var field string
	for _, n := range w.runningNodes() {
		m := n.member
		st := m.core.Status()
		if st.Failed != "" {
			w.failf("%s failed (%s) and still runs", m.id, st.Failed)
			continue
		}
		if view == nil {
			view, field = st.View, n.field
		} else if !slices.Equal(view, st.View) {
			w.failf("views differ: %v, and %v at %s", view, st.View, m.id)
		}
		if n.field != field {
			w.failf("members with different settings run: %s hashes on %s, another on %s", m.id, n.field, field)
		}
		run = append(run, m)
	}
	for _, m := range w.members {
		if m.failed != "" {
			for r, d := range m.delivering {
				if d {
					w.failf("%s failed (%s) and delivers range %d", m.id, m.failed, r)
				}
			}
		}
	}
	// The owners every running member computes: one placement, agreed.
	var owners []handover.MemberID
	for _, m := range run {
		st := m.core.Status()
		got := make([]handover.MemberID, len(st.Ranges))
		for r, rs := range st.Ranges {
			got[r] = rs.Owner
		}
		if owners == nil {
			owners = got
		} else if !slices.Equal(owners, got) {
			w.failf("owners differ: %v, and %v at %s", owners, got, m.id)
		}
	}
	if len(view) > 0 && owners != nil {
		count := map[handover.MemberID]int{}
		for _, o := range owners {
			count[o]++
		}
		lo, hi := w.ranges, 0
		for _, m := range view {
			lo, hi = min(lo, count[m]), max(hi, count[m])
		}
		if hi-lo > 1 {
			w.failf("shares from %d to %d over %v: %v", lo, hi, view, owners)
		}
	}
	for r := range w.ranges {
		owner := handover.MemberID("")
		if owners != nil {
			owner = owners[r]
		}
		by := w.callers(r)
		switch {
		case owner == "" && len(by) > 0:
			w.failf("range %d delivered by %v with no owner", r, by)
		case owner != "" && (len(by) != 1 || by[0] != owner):
			w.failf("range %d delivered by %v, owner %s (no range unserved)", r, by, owner)
		}
	}
}

// script is every line run so far, quiescence's too: a failure found
// while quiescing or by the final checks replays only with them.
func (w *world) script() string {
	return strings.Join(w.lines, "; ")
}

func runSeed(t testing.TB, seed int, steps int) *world {
	return runSeedMode(t, seed, steps, false)
}

func runSeedMode(t testing.TB, seed int, steps int, gentle bool) *world {
	return runSeedWith(t, seed, steps, gentle, usualFaults)
}

// faultSet is what runSeedWith adds to the usual faults.
type faultSet int

const (
	usualFaults faultSet = iota
	// withUnlease: deletes of live members' leases from outside the group.
	withUnlease
	// withHide: those deletes, and hides (cut, unlease, expire and start
	// at once).
	withHide
)

// runSeedWith runs a seed with the faults of set among the usual ones.
func runSeedWith(t testing.TB, seed int, steps int, gentle bool, set faultSet) *world {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	w := newWorld(t, 1+rng.IntN(16))
	if gentle {
		w.exec("gentle")
	}
	w.unleasing, w.hiding = set >= withUnlease, set == withHide
	if rng.IntN(2) == 0 {
		w.exec("fifo")
	}
	if seed%2 == 1 {
		w.exec("quietwatches")
	}
	w.exec("lateclaims")
	if k := rng.IntN(3); k > 0 {
		w.exec(fmt.Sprintf("maxmoves %d", k))
	}
	for range 1 + rng.IntN(4) {
		w.names++
		w.exec(fmt.Sprintf("start n%d", w.names))
	}
	for range steps {
		w.exec(w.random(rng, true))
		if len(w.errs) > 0 {
			return w
		}
	}
	if w.quiet(rng); len(w.errs) == 0 {
		w.checkResumes()
	}
	return w
}

// quiet delivers everything in rng's order and heals every fault
// (quiesce), then checks promise 2 (checkQuiet); a world that does not
// quiesce fails.
func (w *world) quiet(rng *rand.Rand) {
	if !w.quiesce(rng) && len(w.errs) == 0 {
		w.failf("no quiescence after 400 rounds:\n%s", w.dump())
	}
	if len(w.errs) == 0 {
		w.checkQuiet()
	}
}

// dump describes every running member's state.
func (w *world) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "time %dms; %d messages, %d effects, %d API requests in flight\n", w.nowMS, len(w.net), len(w.effects), len(w.api))
	for _, n := range w.sortedNodes() {
		m := n.member
		if m == nil || !m.running {
			fmt.Fprintf(&b, "%s: alive=%v registered=%v\n", n.id, n.alive, w.registered[n.id])
			continue
		}
		st := m.core.Status()
		fmt.Fprintf(&b, "%s: view=%v discovering=%v leaving=%v settled=%v failed=%q registered=%v paused=%v clock=%v valid=%v lease=%v\n",
			m.id, st.View, st.Discovering, st.Leaving, st.Settled, st.Failed, w.registered[n.id], n.paused, w.clock(n), m.validUntil, w.leases[m.id] != nil)
		for r, rs := range st.Ranges {
			fmt.Fprintf(&b, "   r%d %s e%d t%d owner=%s waiting=%v delivering=%v\n", r, rs.State, rs.Epoch, rs.Token, rs.Owner, rs.Waiting, m.delivering[r])
		}
	}
	return b.String()
}

func sortedMembers(m map[handover.MemberID]*apiLease) []handover.MemberID {
	return sortedKeys(m)
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// randomSeeds runs the seeds of -handover.seed and -handover.seeds (at
// most 200 with -short or -race) through run, and stops at the third that
// fails, giving replay's script for each. It returns the seeds run.
func randomSeeds(t *testing.T, run func(seed int) *world, replay func(w *world) string) int {
	seeds := *simSeeds
	if testing.Short() || raceEnabled {
		seeds = min(seeds, 200)
	}
	failed := 0
	for seed := *simSeed; seed < *simSeed+seeds; seed++ {
		w := run(seed)
		if len(w.errs) > 0 {
			failed++
			t.Errorf("seed %d (ranges %d): %s\nreplay: go test ./shard/handover -run TestReplay -handover.script '%s'", seed, w.ranges, strings.Join(w.errs, "\n"), "ranges "+strconv.Itoa(w.ranges)+"; "+replay(w))
			if failed >= 3 {
				return seed - *simSeed + 1
			}
		}
	}
	return seeds
}

func TestRandom(t *testing.T) {
	seeds := randomSeeds(t, func(seed int) *world { return runSeed(t, seed, *simSteps) }, (*world).script)
	t.Logf("%d seeds", seeds)
}

// TestRandomUnlease runs seeds whose faults include deletes of live
// members' leases by someone outside the group: a member's lease gone
// from the server is no proof that it stopped calling handlers.
func TestRandomUnlease(t *testing.T) {
	randomSeeds(t, func(seed int) *world { return runSeedWith(t, seed, *simSteps, false, withUnlease) }, (*world).script)
}

// TestRandomHide runs seeds whose faults also include hides: a member is
// cut from the API server (it learns late that its lease is gone) and from
// the other members, its lease is deleted, the provider drops it, and a new
// member starts at once. The new member knows the hidden one only from the
// records that name it, and takes its ranges once its lease has been gone
// for a lease duration: until its renew deadline it may deliver them.
func TestRandomHide(t *testing.T) {
	randomSeeds(t, func(seed int) *world { return runSeedWith(t, seed, *simSteps, false, withHide) }, (*world).script)
}

// TestRandomGentle runs seeds with joins and graceful leaves only (no
// fault that loses state) and checks that every handover resumes from the
// previous deliverer's final position.
func TestRandomGentle(t *testing.T) {
	randomSeeds(t, func(seed int) *world { return runSeedMode(t, seed, *simSteps, true) }, func(w *world) string {
		// Every line, quiescence's too: the check runs at its end.
		return strings.Join(w.lines, "; ")
	})
}

// TestSameSeedSameScript: the simulator is reproducible, so a failing seed
// replays.
func TestSameSeedSameScript(t *testing.T) {
	for seed := 1; seed <= 30; seed++ {
		a, b := runSeed(t, seed, 300), runSeed(t, seed, 300)
		if !slices.Equal(a.lines, b.lines) {
			t.Fatalf("seed %d gave two scripts:\n%s\n---\n%s", seed, strings.Join(a.lines, "; "), strings.Join(b.lines, "; "))
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

func runScript(t testing.TB, text string) *world {
	lines := strings.FieldsFunc(text, func(r rune) bool { return r == ';' || r == '\n' })
	w := newWorld(t, 16)
	if *simTrace != "" {
		f, err := os.Create(*simTrace)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w.trace = func(s string) { fmt.Fprintf(f, "[%dms %s] %s\n", w.nowMS, w.lines[len(w.lines)-1], s) }
	}
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
	if w.quiet(rng); len(w.errs) == 0 {
		w.checkResumes()
	}
	return w
}

var _ = stage.Addr{}
