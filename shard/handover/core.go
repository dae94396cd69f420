// Package handover is the ownership and handover protocol of a sharded
// informer group (package shard): a plain core, with no actor library,
// under the stage contract. One Core runs in each member; its Step takes one
// input (a message from another member, the cluster's topology, a report of
// its own range informers, a tick) and returns what to send: messages to
// other members (ToMember) and effects on its own range informers
// (ToRanges). The shell in package shard delivers them; the tests
// drive many cores in one goroutine.
//
// The rules:
//   - The hash space is split into B ranges; each is owned by one member of
//     the group view (the members of the current topology that said Hello
//     with the same settings and are not leaving), by rendezvous hashing
//     with bounded load (Assign), so every member with the same view
//     computes the same owner.
//   - Make before break: a member that becomes a range's owner starts its
//     informer, and once it has synced asks every other member of the
//     cluster to release the range (Acquire, with a fresh epoch); the
//     members that said they deliver it are asked last, once the others
//     have answered, so that a member that cannot answer does not leave
//     the range unserved. A member
//     answers (Released) only when its own view says the asker owns the
//     range and it does not deliver the range: if it does, it first stops
//     delivering and waits for its handlers' calls to end. The asker gives
//     the range to its handlers once every member it knows has answered that
//     epoch. Answers of another epoch, and Acquires older than one already
//     seen from the same member, are ignored.
//   - A member that leaves the topology (a crash) is no longer waited for.
//     A graceful leave says Leaving, keeps delivering until the new owners
//     ask, then says Gone.
//
// So no two members deliver one range at the same time as long as the
// provider's topology does not drop a live member (a partition): see
// docs/sharding.md.
package handover

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/actorinformer/actorinformer/stage"
)

// Config are a member's settings. Ranges and HashField must be the same on
// every member of a group.
type Config struct {
	Self      MemberID
	Ranges    int
	HashField string
	// JoinedAt orders members for the tie-break of mismatched settings
	// (a later member gives up); the shell uses the start time.
	JoinedAt int64
	// DiscoveryTicks bounds how long a starting member waits for every
	// member of the topology to answer its Hello before computing
	// ownership (default 4; a member alone in the topology waits that long
	// for members that start with it), counted from the last member that appeared in
	// the topology meanwhile; members that run no group actor (yet) make it
	// wait that long. Waiting only saves work: members started together
	// then list only their own ranges, where the first would list every
	// range and hand most of them over.
	DiscoveryTicks int
	// HelloTicks is the heartbeat period, in ticks (default 4).
	HelloTicks int
	// SettleTicks is how long the view must stay the same before the
	// member starts listing the ranges it gained (default 1): members that
	// start together then hear of each other before they list.
	SettleTicks int
	// LeaveTicks bounds a graceful leave: after that many ticks the member
	// stops delivering what no new owner has asked for (default 60; < 0:
	// never).
	LeaveTicks int
}

type rangeState uint8

const (
	idle rangeState = iota
	syncing
	acquiring
	active
	deactivating
	stopping
)

var stateNames = [...]string{"idle", "syncing", "acquiring", "active", "deactivating", "stopping"}

func (s rangeState) String() string { return stateNames[s] }

type rangeInfo struct {
	state rangeState
	// epoch is that of this member's attempt (syncing, acquiring, active)
	// or of the informer being stopped.
	epoch uint64
	// pending: acquiring, the members that have not released the range;
	// asked: those asked in this attempt.
	pending, asked map[MemberID]struct{}
	// holders: acquiring, members that said they deliver the range (their
	// last Hello), in pending but asked only once every other member has
	// answered: while some member cannot answer, they keep delivering it.
	holders map[MemberID]struct{}
	// prev: acquiring, the member that said it delivered the range.
	prev MemberID
	// deferred: the members that asked for the range and have not been
	// answered, with the epoch they asked with.
	deferred map[MemberID]uint64
	// lastAsk: the latest epoch each member asked for the range with.
	lastAsk map[MemberID]uint64
	// releasedFor: deactivating (and then idle), the member the range is
	// released to; its answer says WasActive.
	releasedFor MemberID
}

type peer struct {
	// active: the ranges the member said it delivers, in its last Hello.
	active   []int
	heard    bool
	ok       bool // same settings
	state    PeerState
	joinedAt int64
}

// Core is one member's protocol state. It is not safe for concurrent use.
type Core struct {
	cfg Config
	out stage.Outbox

	ranges []rangeInfo
	peers  map[MemberID]*peer
	topo   map[MemberID]struct{}
	// ids numbers members for addresses (ToMember).
	ids   []MemberID
	index map[MemberID]uint64

	started     bool // self has been in a topology
	inTopo      bool
	discovering bool
	waiting     map[MemberID]struct{} // discovery: not yet heard of
	// waited: discovery has waited for some member; a member alone in the
	// topology waits DiscoveryTicks for others starting with it.
	waited     bool
	discoverAt int
	leaving    bool
	leftAt     int
	forced     bool // the leave's time is up
	failed     string
	done       bool // Left sent

	ticks  int
	clock  uint64 // Lamport clock for epochs
	view   []MemberID
	owners []MemberID // per range; nil while discovering
	// viewAt is the tick the view last changed at.
	viewAt  int
	settled bool

	// Collected during one Step, sent at its end.
	released map[releaseKey][]int
}

type releaseKey struct {
	to        MemberID
	epoch     uint64
	wasActive bool
}

// NewCore returns the core of member cfg.Self. It does nothing until a
// Topology that contains cfg.Self arrives.
func NewCore(cfg Config) *Core {
	if cfg.DiscoveryTicks <= 0 {
		cfg.DiscoveryTicks = 4
	}
	if cfg.HelloTicks <= 0 {
		cfg.HelloTicks = 4
	}
	if cfg.SettleTicks <= 0 {
		cfg.SettleTicks = 1
	}
	if cfg.LeaveTicks == 0 {
		cfg.LeaveTicks = 60
	}
	c := &Core{
		cfg:      cfg,
		ranges:   make([]rangeInfo, cfg.Ranges),
		peers:    map[MemberID]*peer{},
		topo:     map[MemberID]struct{}{},
		index:    map[MemberID]uint64{},
		released: map[releaseKey][]int{},
	}
	return c
}

// Member returns the member that ToMember(id) addresses.
func (c *Core) Member(id uint64) MemberID { return c.ids[id] }

func (c *Core) addr(m MemberID) stage.Addr {
	id, ok := c.index[m]
	if !ok {
		id = uint64(len(c.ids))
		c.ids = append(c.ids, m)
		c.index[m] = id
	}
	return ToMember(id)
}

// Step takes one input and returns what to send (valid until the next
// Step). It panics on an input of an unknown type.
func (c *Core) Step(msg any) []stage.Msg {
	c.out.Reset()
	switch m := msg.(type) {
	case *Topology:
		c.topology(m)
	case *Hello:
		c.hello(m)
	case *Reject:
		c.fail(fmt.Sprintf("member %s, in the group since before this one, has other settings: %s", m.From, m.Reason))
	case *Acquire:
		c.acquire(m)
	case *Released:
		c.releasedMsg(m)
	case *Unreachable:
		c.unreachable(m.Member)
	case *RangeSynced:
		c.synced(m)
	case *RangeStopped:
		c.stopped(m)
	case *Tick:
		c.tick()
	case *Leave:
		c.leave()
	default:
		panic(fmt.Sprintf("handover: unknown input %T", msg))
	}
	c.reconcile()
	c.flushReleased()
	c.finish()
	return c.out.Msgs()
}

func (c *Core) topology(m *Topology) {
	prev := c.topo
	c.topo = make(map[MemberID]struct{}, len(m.Members))
	for _, id := range m.Members {
		c.topo[id] = struct{}{}
	}
	_, in := c.topo[c.cfg.Self]
	wasIn := c.inTopo
	c.inTopo = in
	if !in {
		return
	}
	if !c.started || !wasIn {
		c.started = true
		c.discovering = true
		c.discoverAt = c.ticks
		c.waiting = map[MemberID]struct{}{}
		c.waited = false
		for id := range c.topo {
			if id != c.cfg.Self {
				c.waiting[id] = struct{}{}
				c.waited = true
				c.sendHello(id, false)
			}
		}
	} else {
		for id := range c.topo {
			if _, old := prev[id]; !old && id != c.cfg.Self {
				c.sendHello(id, false)
				if c.discovering {
					// Members are still arriving (started together):
					// wait for them too.
					c.waiting[id] = struct{}{}
					c.waited = true
					c.discoverAt = c.ticks
				}
			}
		}
	}
	// Members that left the topology are no longer waited for, nor answered.
	for id := range prev {
		if _, still := c.topo[id]; !still {
			c.forget(id)
		}
	}
}

// forget stops waiting for, and answering, member id.
func (c *Core) forget(id MemberID) {
	delete(c.waiting, id)
	for r := range c.ranges {
		ri := &c.ranges[r]
		delete(ri.deferred, id)
		if ri.state == acquiring {
			delete(ri.pending, id)
			delete(ri.holders, id)
		}
	}
}

func (c *Core) sendHello(to MemberID, reply bool) {
	st := Joined
	switch {
	case c.done:
		st = Gone
	case c.leaving || c.failed != "":
		st = Leaving
	}
	var act []int
	for r := range c.ranges {
		if s := c.ranges[r].state; s == active || s == deactivating {
			act = append(act, r)
		}
	}
	c.out.Send(c.addr(to), &Hello{From: c.cfg.Self, Ranges: c.cfg.Ranges, HashField: c.cfg.HashField,
		JoinedAt: c.cfg.JoinedAt, State: st, Active: act, Reply: reply})
}

func (c *Core) broadcastHello() {
	for _, id := range c.sortedTopo() {
		if id != c.cfg.Self {
			c.sendHello(id, false)
		}
	}
}

func (c *Core) peer(id MemberID) *peer {
	p := c.peers[id]
	if p == nil {
		p = &peer{}
		c.peers[id] = p
	}
	return p
}

func (c *Core) hello(m *Hello) {
	if m.From == c.cfg.Self {
		return
	}
	p := c.peer(m.From)
	p.heard = true
	p.joinedAt = m.JoinedAt
	delete(c.waiting, m.From)
	if m.Ranges != c.cfg.Ranges || m.HashField != c.cfg.HashField {
		p.ok = false
		reason := fmt.Sprintf("%d ranges hashed on %q here, %d on %q at %s", c.cfg.Ranges, c.cfg.HashField, m.Ranges, m.HashField, m.From)
		if younger(c.cfg.JoinedAt, c.cfg.Self, m.JoinedAt, m.From) {
			c.fail(reason)
		} else {
			c.out.Send(c.addr(m.From), &Reject{From: c.cfg.Self, Reason: reason})
		}
		return
	}
	p.ok = true
	p.state = m.State
	p.active = m.Active
	if m.State == Gone {
		c.forget(m.From)
	}
	// Two members deliver a range (after a partition healed): the one whose
	// view says the other owns it stops at once.
	if c.started && m.State != Gone {
		c.computeView()
		for _, r := range m.Active {
			if r >= 0 && r < len(c.ranges) && c.ranges[r].state == active && c.owner(r) == m.From {
				c.deactivate(r, "")
			}
		}
	}
	if !m.Reply && c.started {
		c.sendHello(m.From, true)
	}
}

// younger reports whether member a (joined at ja) joined after b.
func younger(ja int64, a MemberID, jb int64, b MemberID) bool {
	if ja != jb {
		return ja > jb
	}
	return a > b
}

func (c *Core) fail(reason string) {
	if c.failed != "" {
		return
	}
	c.failed = reason
	c.out.Send(ToRanges, &Failed{Reason: reason})
	c.broadcastHello()
}

func (c *Core) acquire(m *Acquire) {
	if m.From == c.cfg.Self {
		return
	}
	p := c.peer(m.From)
	if p.heard && !p.ok {
		c.out.Send(c.addr(m.From), &Reject{From: c.cfg.Self, Reason: "settings differ"})
		return
	}
	c.observe(m.Epoch)
	for _, r := range m.Ranges {
		if r < 0 || r >= len(c.ranges) {
			continue
		}
		ri := &c.ranges[r]
		if ri.lastAsk == nil {
			ri.lastAsk = map[MemberID]uint64{}
		}
		if m.Epoch < ri.lastAsk[m.From] {
			continue // older than an ask already seen from that member
		}
		ri.lastAsk[m.From] = m.Epoch
		if ri.deferred == nil {
			ri.deferred = map[MemberID]uint64{}
		}
		ri.deferred[m.From] = m.Epoch
	}
}

func (c *Core) releasedMsg(m *Released) {
	c.observe(m.Epoch)
	for _, r := range m.Ranges {
		if r < 0 || r >= len(c.ranges) {
			continue
		}
		ri := &c.ranges[r]
		if ri.state != acquiring || ri.epoch != m.Epoch {
			continue // an answer to another attempt
		}
		delete(ri.pending, m.From)
		if m.WasActive {
			ri.prev = m.From
		}
	}
}

// unreachable: a message to id came back undelivered, so id runs no group
// actor now (it never started one, it left, or its process is gone). It does
// not deliver any range, so it counts as having answered every ask in
// progress; it stays in the view until the topology drops it or it says
// Gone, so the ranges it owns are not taken from it before that.
func (c *Core) unreachable(id MemberID) {
	if id == c.cfg.Self {
		return
	}
	// A starting member still waits for it (until DiscoveryTicks): members
	// started together may not all run their group actor yet.
	for r := range c.ranges {
		if ri := &c.ranges[r]; ri.state == acquiring {
			delete(ri.pending, id)
			delete(ri.holders, id)
		}
	}
}

func (c *Core) synced(m *RangeSynced) {
	if m.Range < 0 || m.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[m.Range]
	if ri.state != syncing || ri.epoch != m.Epoch {
		return
	}
	ri.state = acquiring
	ri.prev = ""
	ri.pending = map[MemberID]struct{}{}
	ri.asked = map[MemberID]struct{}{}
	ri.holders = map[MemberID]struct{}{}
	c.askNewMembers(m.Range)
}

func (c *Core) stopped(m *RangeStopped) {
	if m.Range < 0 || m.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[m.Range]
	if (ri.state != deactivating && ri.state != stopping) || ri.epoch != m.Epoch {
		return
	}
	ri.state = idle
}

func (c *Core) tick() {
	c.ticks++
	if !c.started || c.done {
		return
	}
	if c.discovering && c.ticks-c.discoverAt >= c.cfg.DiscoveryTicks {
		c.discovering = false
	}
	if c.leaving && c.cfg.LeaveTicks > 0 && c.ticks-c.leftAt >= c.cfg.LeaveTicks {
		c.forced = true
	}
	// Ask again those that have not answered (a message may be lost).
	asks := map[MemberID]map[uint64][]int{}
	for r := range c.ranges {
		ri := &c.ranges[r]
		if ri.state != acquiring {
			continue
		}
		for id := range ri.pending {
			if _, held := ri.holders[id]; held {
				continue // not asked yet
			}
			if asks[id] == nil {
				asks[id] = map[uint64][]int{}
			}
			asks[id][ri.epoch] = append(asks[id][ri.epoch], r)
		}
	}
	for _, id := range sortedKeys(asks) {
		for _, e := range sortedKeys(asks[id]) {
			c.out.Send(c.addr(id), &Acquire{From: c.cfg.Self, Epoch: e, Ranges: asks[id][e]})
		}
	}
	if c.ticks%c.cfg.HelloTicks == 0 && c.inTopo {
		c.broadcastHello()
	}
}

func (c *Core) leave() {
	if c.leaving {
		return
	}
	c.leaving = true
	c.leftAt = c.ticks
	if !c.started {
		c.done = true
		c.out.Send(ToRanges, &Left{})
		return
	}
	c.broadcastHello()
}

func (c *Core) observe(e uint64) {
	if e > c.clock {
		c.clock = e
	}
}

func (c *Core) nextEpoch() uint64 {
	c.clock++
	return c.clock
}

// eligible: this member may own ranges.
func (c *Core) eligible() bool {
	return c.inTopo && !c.leaving && c.failed == ""
}

// computeView sets the group view and each range's owner.
func (c *Core) computeView() {
	prev := slices.Clone(c.view)
	defer func() {
		if !slices.Equal(prev, c.view) {
			c.viewAt = c.ticks
		}
	}()
	c.view = c.view[:0]
	if c.eligible() {
		c.view = append(c.view, c.cfg.Self)
	}
	for id := range c.topo {
		if id == c.cfg.Self {
			continue
		}
		if p := c.peers[id]; p != nil && p.heard && p.ok && p.state == Joined {
			c.view = append(c.view, id)
		}
	}
	slices.Sort(c.view)
	c.owners = Assign(c.view, len(c.ranges))
}

func (c *Core) owner(r int) MemberID { return c.owners[r] }

// reconcile moves every range towards what the view says, and answers the
// requests that can be answered.
func (c *Core) reconcile() {
	if !c.started || c.done {
		return
	}
	if c.discovering && len(c.waiting) == 0 && c.waited {
		c.discovering = false // every member has answered
	}
	c.computeView()
	cutOff := !c.inTopo
	for r := range c.ranges {
		ri := &c.ranges[r]
		mine := c.owner(r) == c.cfg.Self
		switch ri.state {
		case idle:
			if mine && !c.discovering && c.ticks-c.viewAt >= c.cfg.SettleTicks {
				ri.state = syncing
				ri.epoch = c.nextEpoch()
				ri.releasedFor = ""
				c.out.Send(ToRanges, &StartRange{Range: r, Epoch: ri.epoch})
			}
		case syncing, acquiring:
			if !mine {
				ri.state = stopping
				ri.pending, ri.asked, ri.holders = nil, nil, nil
				c.out.Send(ToRanges, &StopRange{Range: r, Epoch: ri.epoch})
			} else if ri.state == acquiring {
				c.askNewMembers(r)
				if len(ri.pending) == 0 {
					ri.state = active
					c.out.Send(ToRanges, &ActivateRange{Range: r, Epoch: ri.epoch, From: ri.prev})
				}
			}
		case active:
			// Without the topology, or with nobody to hand over to, or once
			// a leave's time is up, stop delivering without an asker.
			if cutOff || c.failed != "" || c.forced || (c.leaving && len(c.view) == 0) {
				c.deactivate(r, "")
			}
		}
		c.answerDeferred(r)
	}
	c.settled = !c.discovering && c.inTopo && c.failed == ""
	for r := range c.ranges {
		if (c.owner(r) == c.cfg.Self) != (c.ranges[r].state == active) {
			c.settled = false
			break
		}
	}
}

// finish says goodbye once a leaving or failed member holds nothing, after
// its last answers.
func (c *Core) finish() {
	if c.started && !c.done && (c.leaving || c.failed != "") && c.allIdle() {
		c.done = true
		c.broadcastHello() // says Gone
		c.out.Send(ToRanges, &Left{})
	}
}

func (c *Core) allIdle() bool {
	for r := range c.ranges {
		if c.ranges[r].state != idle {
			return false
		}
	}
	return true
}

// askNewMembers asks the members that joined the topology since the range
// was asked for: one that dropped out of the topology and came back may
// still deliver the range.
func (c *Core) askNewMembers(r int) {
	ri := &c.ranges[r]
	for _, id := range c.sortedTopo() {
		if id == c.cfg.Self {
			continue
		}
		if _, done := ri.asked[id]; done {
			continue
		}
		if _, held := ri.holders[id]; held {
			continue
		}
		p := c.peers[id]
		if p != nil && p.heard && p.state == Gone {
			continue
		}
		if p != nil && slices.Contains(p.active, r) {
			// The range's deliverer is asked last: until every other member
			// has answered, it keeps delivering.
			ri.holders[id] = struct{}{}
			ri.pending[id] = struct{}{}
			continue
		}
		c.ask(r, id)
	}
	c.askHolders(r)
}

// askHolders asks the held-back members once every other one has answered.
func (c *Core) askHolders(r int) {
	ri := &c.ranges[r]
	if len(ri.holders) == 0 || len(ri.pending) > len(ri.holders) {
		return
	}
	for _, id := range sortedKeys(ri.holders) {
		if _, still := ri.pending[id]; still {
			c.ask(r, id)
		}
	}
	clear(ri.holders)
}

func (c *Core) ask(r int, id MemberID) {
	ri := &c.ranges[r]
	ri.asked[id] = struct{}{}
	ri.pending[id] = struct{}{}
	c.out.Send(c.addr(id), &Acquire{From: c.cfg.Self, Epoch: ri.epoch, Ranges: []int{r}})
}

func (c *Core) deactivate(r int, to MemberID) {
	ri := &c.ranges[r]
	ri.state = deactivating
	ri.releasedFor = to
	c.out.Send(ToRanges, &DeactivateRange{Range: r, Epoch: ri.epoch, To: to})
}

func (c *Core) answerDeferred(r int) {
	ri := &c.ranges[r]
	if len(ri.deferred) == 0 {
		return
	}
	for _, id := range sortedKeys(ri.deferred) {
		e := ri.deferred[id]
		if _, in := c.topo[id]; !in {
			delete(ri.deferred, id)
			continue
		}
		if c.owner(r) != id {
			continue // not the owner in this member's view: wait
		}
		switch ri.state {
		case idle:
			// releasedFor stays until the range is started again, so that an
			// answer to a repeated ask says WasActive too.
			k := releaseKey{to: id, epoch: e, wasActive: ri.releasedFor == id}
			c.released[k] = append(c.released[k], r)
			delete(ri.deferred, id)
		case active:
			c.deactivate(r, id)
		}
	}
}

func (c *Core) flushReleased() {
	if len(c.released) == 0 {
		return
	}
	keys := make([]releaseKey, 0, len(c.released))
	for k := range c.released {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b releaseKey) int {
		if x := cmp.Compare(a.to, b.to); x != 0 {
			return x
		}
		if x := cmp.Compare(a.epoch, b.epoch); x != 0 {
			return x
		}
		if a.wasActive == b.wasActive {
			return 0
		}
		if a.wasActive {
			return 1
		}
		return -1
	})
	for _, k := range keys {
		c.out.Send(c.addr(k.to), &Released{From: c.cfg.Self, Epoch: k.epoch, Ranges: c.released[k], WasActive: k.wasActive})
		delete(c.released, k)
	}
}

func (c *Core) sortedTopo() []MemberID { return sortedKeys(c.topo) }

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Assign returns the owner of each of n ranges among members (entries ""
// when members is empty): rendezvous hashing with bounded load. Ranges are
// taken in order; each goes to the member with the highest score for it
// that still has room: with n = q·m + r over m members, r members own q+1
// ranges and the others q. Without the bound, 16 ranges over 3 members
// often give one member twice another's share. Every member computes the
// same answer, whatever the order of members; a join or a leave moves
// little more than the joining or leaving member's share.
func Assign(members []MemberID, n int) []MemberID {
	out := make([]MemberID, n)
	if len(members) == 0 {
		return out
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	q, rem := n/len(ms), n%len(ms)
	full := 0 // members that own q+1 ranges
	load := make(map[MemberID]int, len(ms))
	order := make([]MemberID, len(ms))
	for r := range n {
		copy(order, ms)
		slices.SortFunc(order, func(a, b MemberID) int {
			sa, sb := score(a, r), score(b, r)
			if sa != sb {
				return cmp.Compare(sb, sa)
			}
			return cmp.Compare(b, a)
		})
		for _, m := range order {
			if load[m] < q || load[m] == q && full < rem {
				out[r] = m
				load[m]++
				if load[m] == q+1 {
					full++
				}
				break
			}
		}
	}
	return out
}

func score(m MemberID, r int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(m))
	x := h.Sum64() ^ (uint64(r)+1)*0x9e3779b97f4a7c15
	// splitmix64's finaliser spreads the bits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// RangeStatus is one range as a member sees it.
type RangeStatus struct {
	// State is idle, syncing, acquiring, active, deactivating or stopping.
	State string
	// Epoch is that of the member's last attempt on the range.
	Epoch uint64
	// Owner is the range's owner in the member's view ("" while it
	// discovers the group, or when the view is empty).
	Owner MemberID
}

// Status is a member's protocol state, for status pages and tests.
type Status struct {
	Self MemberID
	// View are the members that may own ranges, sorted.
	View   []MemberID
	Ranges []RangeStatus
	// Discovering: the member waits for the others' answers before it
	// computes ownership.
	Discovering, Leaving, Done bool
	// Settled: the member delivers exactly the ranges its view gives it.
	Settled bool
	Failed  string
}

// Status returns the member's state.
func (c *Core) Status() Status {
	s := Status{Self: c.cfg.Self, View: slices.Clone(c.view), Discovering: c.discovering,
		Leaving: c.leaving, Done: c.done, Settled: c.settled, Failed: c.failed,
		Ranges: make([]RangeStatus, len(c.ranges))}
	for r := range c.ranges {
		s.Ranges[r] = RangeStatus{State: c.ranges[r].state.String(), Epoch: c.ranges[r].epoch}
		if c.owners != nil && !c.discovering {
			s.Ranges[r].Owner = c.owners[r]
		}
	}
	return s
}
